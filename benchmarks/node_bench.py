"""Node benchmark (not a test): how long the local node and the operator on it take.

    .venv/bin/python benchmarks/node_bench.py [--runs 3] [--operator]

Needs root and what `spyre-operator cluster install --node` installs (the preflight
says what is missing). Each run brings a node up in a fresh folder and takes it down
again; the image store (containerd's root in the cache) is kept, so runs after the first
find the images imported already. With --operator, each run also imports the operator
and CPU serving images (built first if not cached), installs the chart, applies the tiny
CPU SpyreModel and times apply -> Ready and apply -> first completion through the
Service's ClusterIP. Prints each run's figures, then the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from spyre_operator.local import node_operator, preflight
from spyre_operator.local.node import Node
from spyre_operator.local.tools import tool


def timed(figures: dict[str, list[float]], name: str, step: Callable[[], object]) -> None:
    started = time.monotonic()
    step()
    figures.setdefault(name, []).append(time.monotonic() - started)
    print(f"  {name}: {figures[name][-1]:.1f} s", flush=True)


def operator_run(node: Node, folder: Path, figures: dict[str, list[float]]) -> None:
    timed(
        figures,
        "images build (if needed) + import",
        lambda: node_operator.import_images(node, print),
    )
    timed(figures, "helm install of the operator", lambda: node_operator.install_chart(node))
    models = node_operator.make_tiny_model(folder / "models")
    kubectl = [tool("kubectl"), "--kubeconfig", str(node.kubeconfig), "-n", "default"]

    def run(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([*kubectl, *args], input=stdin, capture_output=True, text=True)
        done.check_returncode()
        return done.stdout

    started = time.monotonic()
    run("apply", "-f", "-", stdin=json.dumps(node_operator.tiny_model(models)))
    ready = "--for=jsonpath={.status.phase}=Ready"
    run("wait", ready, "--timeout=1800s", f"spyremodel/{node_operator.MODEL_NAME}")
    figures.setdefault("apply -> Ready", []).append(time.monotonic() - started)
    service = json.loads(run("get", "svc", node_operator.MODEL_NAME, "-o", "json"))
    node_operator.complete(service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"], "Hi")
    figures.setdefault("apply -> first completion", []).append(time.monotonic() - started)
    for name in ("apply -> Ready", "apply -> first completion"):
        print(f"  {name}: {figures[name][-1]:.1f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--operator", action="store_true", help="also time the operator flow")
    args = parser.parse_args()
    found = preflight.problems()
    if found:
        print(preflight.report(found), file=sys.stderr)
        return 1
    figures: dict[str, list[float]] = {}
    for run in range(1, args.runs + 1):
        print(f"run {run}", flush=True)
        with tempfile.TemporaryDirectory(prefix="node-bench-") as tmp:
            node = Node(Path(tmp))
            try:
                timed(figures, "node up (nothing -> Ready, schedulable)", node.up)
                if args.operator:
                    operator_run(node, Path(tmp), figures)
            finally:
                timed(figures, "node down (everything removed, host restored)", node.down)
    for name, values in figures.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: median {statistics.median(values):.1f} s (runs: {runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
