"""Node benchmark (not a test): how long the local node and the operator on it take.

    .venv/bin/python benchmarks/node_bench.py [--runs 3] [--operator]

Needs root and what `spyre-operator cluster install --node` installs (the preflight
says what is missing). Each run brings a node up in a fresh folder and takes it down
again; the image store (containerd's root in the cache) is kept, so runs after the first
find the images imported already. With --operator, each run also imports the operator
and CPU serving images (built first if not cached), installs the chart, applies the tiny
CPU SpyreModel and times apply -> Ready and apply -> first completion through the
Service's ClusterIP. Prints each run's figures, then the medians.

Yardsticks, measured in the same runs: the API-server-only control plane (what the fast
tests start) beside node up; a bare pod of the pause image, create -> Running, beside the
operator's pods; and the compile pod's own seconds (from its termination message, in
status.cache) beside apply -> Ready, so what the operator adds is visible.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from spyre_devcluster import node_operator, preflight
from spyre_devcluster.controlplane import ControlPlane
from spyre_devcluster.images import recipes
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node


def timed(figures: dict[str, list[float]], name: str, step: Callable[[], object]) -> None:
    started = time.monotonic()
    step()
    figures.setdefault(name, []).append(time.monotonic() - started)
    print(f"  {name}: {figures[name][-1]:.1f} s", flush=True)


def record(figures: dict[str, list[float]], name: str, seconds: float) -> None:
    figures.setdefault(name, []).append(seconds)
    print(f"  {name}: {seconds:.1f} s", flush=True)


def control_plane_run(folder: Path, figures: dict[str, list[float]]) -> None:
    """Yardstick: the control plane alone (no containerd, kubelet, proxy or scheduler)."""
    plane = ControlPlane(folder)
    timed(figures, "yardstick: control plane alone up", plane.up)
    plane.down()


def bare_pod(node: Node, figures: dict[str, list[float]]) -> None:
    """Yardstick: a pod of the pause image (already in the node), create -> Running."""
    run = Kubectl(node.kubeconfig)
    started = time.monotonic()
    run("run", "bench-bare", f"--image={recipes.PAUSE}", "--restart=Never")
    run("wait", "--for=jsonpath={.status.phase}=Running", "--timeout=300s", "pod/bench-bare")
    record(figures, "yardstick: bare pod create -> Running", time.monotonic() - started)
    run("delete", "pod", "bench-bare", "--wait=false")


def operator_run(node: Node, folder: Path, figures: dict[str, list[float]]) -> None:
    timed(
        figures,
        "images build (if needed) + push",
        lambda: node_operator.push_images(node, print),
    )
    timed(figures, "helm install of the operator", lambda: node_operator.install_chart(node))
    models = node_operator.make_tiny_model(folder / "models")
    run = Kubectl(node.kubeconfig)
    node_operator.add_pull_secret(node, "default")
    started = time.monotonic()
    run("apply", "-f", "-", input=json.dumps(node_operator.tiny_model(host_path=models)))
    ready = "--for=jsonpath={.status.phase}=Ready"
    run("wait", ready, "--timeout=1800s", f"spyremodel/{node_operator.MODEL_NAME}")
    record(figures, "apply -> Ready", time.monotonic() - started)
    service = run.get("svc", node_operator.MODEL_NAME)
    node_operator.complete(service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"], "Hi")
    record(figures, "apply -> first completion", time.monotonic() - started)
    model = run.get("spyremodel", node_operator.MODEL_NAME)
    record(figures, "yardstick: the compile pod's own seconds", model["status"]["cache"]["seconds"])


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
            control_plane_run(Path(tmp) / "plane", figures)
            node = Node(Path(tmp) / "node")
            try:
                timed(figures, "node up (nothing -> Ready, schedulable)", node.up)
                bare_pod(node, figures)
                if args.operator:
                    operator_run(node, Path(tmp) / "node", figures)
            finally:
                timed(figures, "node down (everything removed, host restored)", node.down)
    for name, values in figures.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: median {statistics.median(values):.1f} s (runs: {runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
