"""What the shared compiled-graph cache buys (a script, not a test), on the real node.

    .venv/bin/python benchmarks/cache_effect.py [--runs 3] [--backend inductor]

Brings the node up, installs the operator with its chart, applies the tiny CPU
SpyreModel and times apply -> Ready (the first deploy: compile Job, then serving). Then,
with the model scaled to zero, it starts bare serving pods from the operator's own pod
template, alternating two kinds, `--runs` of each:
  cached     the template as rendered: the cache volume with the key's compiled graphs;
  compiling  the same template with an empty cache (an emptyDir instead of the volume)
             and the require-precompiled switch off, so vLLM compiles at start-up.
For each pod: create -> Ready (its readiness probe) and create -> first completion
(asked at the pod's IP). Prints every run, then median, spread and the ratio
compiling / cached. Needs root and `spyre-operator cluster install --node`; takes the
node down at the end.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spyre_operator.local import node_operator, preflight
from spyre_operator.local.kubectl import Kubectl
from spyre_operator.local.node import Node
from spyre_operator.local.simulate import poll_until

WAIT = 1800
KINDS = ("cached", "compiling")


def bare_pod(template: dict[str, Any], name: str, kind: str) -> dict[str, Any]:
    """A pod from the Deployment's template, without its labels (the ReplicaSet would
    adopt it); for `compiling`, an empty cache and no require-precompiled switch."""
    spec = copy.deepcopy(template["spec"])
    if kind == "compiling":
        spec["volumes"] = [
            {"name": v["name"], "emptyDir": {}} if v["name"] == "graph-cache" else v
            for v in spec["volumes"]
        ]
        for env in spec["containers"][0]["env"]:
            if env["name"].endswith("REQUIRE_PRECOMPILED_DECODERS"):
                env["value"] = "0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "cache-effect"}},
        "spec": spec | {"restartPolicy": "Never"},
    }


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def time_pod(cluster: Kubectl, doc: dict[str, Any]) -> tuple[float, float]:
    """Seconds from create to Ready and to the first completion at the pod's IP."""
    name = doc["metadata"]["name"]
    started = time.monotonic()
    cluster("create", "-f", "-", input=json.dumps(doc))

    def ready() -> dict[str, Any] | None:
        pod = cluster.get(f"pod/{name}")
        if pod["status"].get("phase") == "Failed":
            raise RuntimeError(f"{name} failed: {cluster('logs', name)[-3000:]}")
        return pod if is_ready(pod) else None

    pod = poll_until(ready, f"{name} Ready", WAIT, interval=0.5)
    to_ready = time.monotonic() - started
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    node_operator.complete(pod["status"]["podIP"], port, "Hello", timeout=120)
    to_answer = time.monotonic() - started
    cluster("delete", "pod", name, "--wait=true", "--timeout=120s")
    return to_ready, to_answer


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):6.1f} s  (min {min(values):.1f}, max {max(values):.1f})"
    )


def measure(node: Node, folder: Path, runs: int, backend: str) -> None:
    cluster = Kubectl(node.kubeconfig)
    node_operator.push_images(node, print)
    node_operator.install_chart(node)
    node_operator.add_pull_secret(node, "default")
    models = node_operator.make_tiny_model(folder / "models")
    model = node_operator.tiny_model(models)
    model["spec"]["backend"] = backend
    name = model["metadata"]["name"]
    started = time.monotonic()
    cluster("apply", "-f", "-", input=json.dumps(model))
    cluster("wait", "--for=jsonpath={.status.phase}=Ready", f"--timeout={WAIT}s", f"sm/{name}")
    first_deploy = time.monotonic() - started
    print(f"first deploy, apply -> Ready: {first_deploy:.1f} s", flush=True)
    template = cluster.get(f"deployment/{name}")["spec"]["template"]
    cluster("scale", f"sm/{name}", "--replicas=0")
    poll_until(
        lambda: not cluster.get(f"deployment/{name}")["status"].get("replicas"), "0", WAIT, 1.0
    )
    figures: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for run in range(1, runs + 1):
        for kind in KINDS:
            figures[kind].append(time_pod(cluster, bare_pod(template, f"{kind}-{run}", kind)))
            to_ready, to_answer = figures[kind][-1]
            print(
                f"run {run} {kind:9}: Ready {to_ready:6.1f} s, answer {to_answer:6.1f} s",
                flush=True,
            )
    print(f"\nbackend {backend}, {runs} runs of each kind, pod create -> ...")
    for index, what in enumerate(("Ready", "first completion")):
        medians = {}
        for kind in KINDS:
            values = [f[index] for f in figures[kind]]
            medians[kind] = statistics.median(values)
            print(f"  {what:16} {kind:9} {summary(values)}")
        print(
            f"  {what:16} ratio compiling / cached: {medians['compiling'] / medians['cached']:.2f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", default="inductor", help="the SpyreModel's CPU backend")
    args = parser.parse_args()
    found = preflight.problems()
    if found:
        print(preflight.report(found), file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="cache-effect-") as tmp:
        node = Node(Path(tmp))
        try:
            node.up()
            measure(node, Path(tmp), args.runs, args.backend)
        finally:
            node.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
