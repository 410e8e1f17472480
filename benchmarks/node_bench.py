"""Node benchmark (not a test): how long `cluster up --node` and `down` take.

    .venv/bin/python benchmarks/node_bench.py [--runs 3]

Needs root and what `spyre-operator cluster install --node` installs (the preflight
says what is missing). Each run brings a node up in a fresh folder and takes it down
again; the image store (containerd's root in the cache) is kept, so runs after the first
find the pause image imported already. Prints each run's phases, then the medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from spyre_operator.local import preflight
from spyre_operator.local.node import Node


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    found = preflight.problems()
    if found:
        print(preflight.report(found), file=sys.stderr)
        return 1
    ups, downs = [], []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="node-bench-") as tmp:
            node = Node(Path(tmp))
            started = time.monotonic()
            node.up(log=lambda line, run=run: print(f"  run {run} {line}"))
            ups.append(time.monotonic() - started)
            started = time.monotonic()
            node.down()
            downs.append(time.monotonic() - started)
        print(f"run {run}: up (nothing -> node Ready and schedulable) {ups[-1]:.1f} s, "
              f"down (everything removed, host restored) {downs[-1]:.1f} s")  # fmt: skip
    print(f"node up:   median {statistics.median(ups):.1f} s  (runs: "
          f"{', '.join(f'{t:.1f}' for t in ups)})")  # fmt: skip
    print(f"node down: median {statistics.median(downs):.1f} s  (runs: "
          f"{', '.join(f'{t:.1f}' for t in downs)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
