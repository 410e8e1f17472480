"""Operator benchmark (not a test): latency, idle writes and memory on a local control plane.

    .venv/bin/python benchmarks/operator_bench.py [--singles 10] [--sizes 50 200]
                                                  [--rss-models 1000]

Starts its own control plane and `spyre-operator run` (a subprocess), then prints:
- raw Job creates (POST round trips) on the same API server, the yardstick: back to back,
  and one at a time 1 s apart as the single SpyreModels are created (an API server that
  has been idle for a second answers a POST more slowly than one in a stream of them);
- create -> Job, from the API server's answer to the SpyreModel POST (the SpyreModel
  exists) and from the moment the POST was sent, to the compile Job appearing in a watch:
  for --singles SpyreModels created one at a time in a namespace that already has its
  cache PVC, --singles each in a new namespace (PVC, then Job), and bursts of --sizes;
- JobComplete -> Deployment: from the Job's status update to the Deployment appearing
  (median and p95; every SpyreModel with its own cache key);
- API writes per idle reconcile (the operator's own counter, over full resync passes that
  start once the operator has made no write for 3 s), and the reads (GET, LIST) the API
  server counted meanwhile of the kinds the operator reads (`apiserver_request_total`);
- the operator's peak RSS with --rss-models SpyreModels: the burst namespaces are deleted
  and the operator restarted first, so its whole life saw exactly that many.

    .venv/bin/python benchmarks/operator_bench.py --scale 10000 [--unrelated 10000]
                                                  [--burst 1000] [--resync 120]

The scale mode instead (operator_scale.py says what it measures); what both modes measure
with is operator_harness.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from operator_harness import GAP, Bench, Timings, ms, wait
from operator_scale import scale

from spyre_operator.kube.client import ApiError


def idle_writes(bench: Bench) -> tuple[float, float, dict[str, float], dict[str, float]]:
    """(writes, reconciles, writes by request, reads by request) over idle resync
    passes, counted once the operator has finished what the bursts left it (its
    Events, late status updates): no write for QUIET seconds."""
    bench.wait_quiet()
    before, reads_before = bench.metrics(), bench.api_reads()
    wait(
        lambda: (
            bench.metrics()["spyre_operator_reconciles_total"]
            >= before["spyre_operator_reconciles_total"] + 400
        ),
        "idle passes",
    )
    after, reads = bench.metrics(), bench.api_reads()
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    by_request = {
        k: v for k, v in delta.items() if k.startswith("spyre_operator_api_requests") and v
    }
    reads = {k: v - reads_before.get(k, 0.0) for k, v in reads.items()}
    return (
        delta["spyre_operator_api_writes_total"],
        delta["spyre_operator_reconciles_total"],
        by_request,
        {k: v for k, v in reads.items() if v},
    )


def delete_namespaces(bench: Bench, names: list[str]) -> None:
    for name in names:
        bench.kube.request("DELETE", f"/api/v1/namespaces/{name}")
        # No pvc-protection controller on the local control plane: release the claims.
        for claim in bench.kube.request("GET", f"/api/v1/namespaces/{name}/persistentvolumeclaims")[
            "items"
        ]:
            nofinalizers = {"metadata": {"finalizers": None}}
            bench.kube.patch("PersistentVolumeClaim", name, claim["metadata"]["name"], nofinalizers)
    wait(
        lambda: not any(exists(bench, f"/api/v1/namespaces/{name}") for name in names),
        "namespaces deleted",
    )


def exists(bench: Bench, url: str) -> bool:
    try:
        bench.kube.request("GET", url)
    except ApiError as err:
        if err.not_found:
            return False
        raise
    return True


def memory(bench: Bench, count: int, resync: float) -> float:
    """Peak RSS of a fresh operator over its life with exactly `count` SpyreModels."""
    bench.stop_operator()
    bench.start_operator(resync)
    ns = bench.namespace("rss")
    for i in range(count):
        bench.kube.create(bench.model(ns, i))
    wait(
        lambda: len(bench.kube.list("Job", ns, "app.kubernetes.io/component=compile")) >= count,
        f"{count} Jobs",
    )
    before = bench.metrics()["spyre_operator_reconciles_total"]
    wait(
        lambda: bench.metrics()["spyre_operator_reconciles_total"] >= before + count,
        "one resync pass",
    )
    return bench.peak_rss_mb()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--singles", type=int, default=10, help="single creates, one at a time")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--rss-models", type=int, default=1000)
    parser.add_argument("--resync", type=float, default=20.0, help="resync seconds")
    parser.add_argument("--scale", type=int, default=0, help="the scale mode: SpyreModels")
    parser.add_argument("--unrelated", type=int, default=10000, help="scale mode: Pods+Jobs")
    parser.add_argument("--burst", type=int, default=1000, help="scale mode: burst size")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="operator-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start_operator(args.resync)
            if args.scale:
                scale(bench, args.scale, args.unrelated, args.burst, args.resync)
                return 0
            raw_ns = bench.namespace("raw")
            raw = bench.raw_creates(raw_ns, 50)
            print(f"raw Job create, back to back (n=50):        {ms(raw)}")
            raw = bench.raw_creates(raw_ns, args.singles, GAP)
            print(
                f"raw Job create, {GAP:g} s apart (n={args.singles}):        {ms(raw)}", flush=True
            )
            # A first SpyreModel creates the namespace's cache PVC; the singles after it
            # find it (the usual case), the cold ones each create a namespace and its PVC.
            warm = bench.namespace("singles")
            bench.singles(warm, 0, 1, GAP)
            bench.singles(warm, 1, args.singles, GAP).report(f"single x{args.singles}, PVC there")
            cold = Timings()
            for i in range(args.singles):
                cold += bench.singles(bench.namespace(f"cold-{i}"), 0, 1, GAP)
            cold.report(f"single x{args.singles}, new namespace")
            for size in args.sizes:
                bench.burst(size).report(f"burst {size}")
            writes, passes, by_request, reads = idle_writes(bench)
            print(
                f"idle: {writes:.0f} API writes in {passes:.0f} reconciles "
                f"({writes / passes:.3f} per reconcile) {by_request or ''}",
                flush=True,
            )
            print(
                f"idle: {sum(reads.values()):.0f} API reads in {passes:.0f} reconciles "
                f"({sum(reads.values()) / passes:.3f} per reconcile) {reads}",
                flush=True,
            )
            names = ["singles"] + [f"cold-{i}" for i in range(args.singles)]
            delete_namespaces(bench, names + [f"burst-{size}" for size in args.sizes])
            rss = memory(bench, args.rss_models, args.resync)
            print(f"operator peak RSS with {args.rss_models} SpyreModels: {rss:.0f} MB")
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
