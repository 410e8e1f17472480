"""Cards benchmark (not a test): a spec change that needs a new cache key, change -> Ready
on the new key, with the node's cards full beside the same change with cards free.

    .venv/bin/python benchmarks/cards_bench.py [--runs 1]

Needs root and what `spyre-operator cluster install --node` installs. Brings up a node
with 8 fake cards, the chart-installed operator, and per run two CPU stand-in models of 4
cards (docs/operator.md, "Cards"), one at a time: `free` with 1 replica (4 of the 8 cards
held), `full` with 2 (all 8). Each is made Ready, then its batching changes (a new key):
`free` compiles on the 4 free cards, `full` on the cards of one of its replicas (the
hand-off), while the other serves. Prints change -> Ready on the new key for both, the
compile's own seconds (its pod's summary) as the yardstick of what cannot be saved, and
how long its pod waited for a node (status.cache.pendingSeconds: for cards, when full).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spyre_devcluster import node_operator, preflight
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import SPYRE_PF
from spyre_devcluster.simulate import poll_until

CARDS = 4
WAIT = 2400.0


def ready(run: Kubectl, name: str, replicas: int, old: str | None = None) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        st = run.get(f"spyremodel/{name}").get("status") or {}
        conds = {c["type"]: c["status"] for c in st.get("conditions") or []}
        done = conds.get("Ready") == "True" and st.get("readyReplicas") == replicas
        done = done and st.get("activeCacheKey") not in (None, old)
        return st if done else None

    found: dict[str, Any] = poll_until(probe, f"{name} Ready", WAIT, 1.0)
    return found


def change(run: Kubectl, models: Path, name: str, replicas: int, seqs: int) -> dict[str, float]:
    """Change -> Ready on the new key, the new compile's own seconds and its pod's wait for
    a node (for cards); `seqs`: the new maxNumSeqs, a key no model of the run compiled
    before (else nothing would compile)."""
    doc = node_operator.tiny_model(name, cards=CARDS, host_path=models)
    doc["spec"]["replicas"] = replicas
    run("apply", "-f", "-", input=json.dumps(doc))
    old = ready(run, name, replicas)["activeCacheKey"]
    patch = {"spec": {"batching": {"continuous": {"maxNumSeqs": seqs}}}}
    started = time.monotonic()
    run("patch", f"spyremodel/{name}", "--type=merge", "-p", json.dumps(patch))
    st = ready(run, name, replicas, old)
    took = time.monotonic() - started
    run("delete", f"spyremodel/{name}", "--wait=true", timeout=600)
    cache = st["cache"]
    return {
        "change -> Ready on the new key": took,
        "the compile itself (the yardstick)": float(cache.get("seconds") or 0.0),
        "its pod waiting for a node (cards)": float(cache.get("pendingSeconds") or 0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    found = preflight.problems()
    if found:
        print(preflight.report(found), file=sys.stderr)
        return 1
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="cards-bench-") as tmp:
        folder = Path(tmp)
        node = Node(folder / "node")
        node.up(cards={SPYRE_PF: node_operator.NODE_CARDS})
        try:
            node_operator.push_images(node, print)
            node_operator.install_chart(node)
            node_operator.add_pull_secret(node, "default")
            models = node_operator.make_tiny_model(folder / "models")
            run = Kubectl(node.kubeconfig)
            for n in range(args.runs):
                for i, (label, replicas) in enumerate((("free", 1), ("full", 2))):
                    name, seqs = f"bench-{label}-{n}", 3 + 2 * n + i  # 2 is the first key's
                    measured = change(run, models, name, replicas, seqs)
                    for what, seconds in measured.items():
                        figures.setdefault(f"cards {label}: {what}", []).append(seconds)
                    said = ", ".join(f"{what} {s:.1f} s" for what, s in measured.items())
                    print(f"run {n} cards {label}: {said}", flush=True)
        finally:
            node.down()
    print("\nmedians:")
    for name, values in figures.items():
        print(f"  {name}: {statistics.median(values):.1f} s over {len(values)}")
    full = statistics.median(figures["cards full: change -> Ready on the new key"])
    free = statistics.median(figures["cards free: change -> Ready on the new key"])
    print(f"  full / free: {full / free:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
