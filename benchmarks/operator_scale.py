"""The scale mode of benchmarks/operator_bench.py (its harness: operator_harness.py).

    .venv/bin/python benchmarks/operator_bench.py --scale 10000 [--unrelated 10000]
                                                  [--burst 1000] [--resync 120]

A cluster-wide operator (as the chart's default), each figure beside its yardstick from
the same run: the objects the operator's watches received for
--unrelated Pods and Jobs (half each, and a tenth as many PVCs) in namespaces of their
own (the API server filters them out: 0); create -> Job for a burst of --burst
SpyreModels created back to back, beside the time of as many raw Job POSTs in a row; then
SpyreModels up to --scale (created 16 at a time, each with its own compile Job), the
operator's RSS with them, and again once each has its inventory entry (made by the work
queue's low lane after the burst); and the reconciles of one --resync period of resync
passes once the operator is idle (a period after it made its last write), with its
SpyreModels not Ready (the compile Jobs of the burst's are completed, their Deployments
never become available; the others' never finish): writes per reconcile and API requests
(reads and writes) per reconcile, as the rate of a whole pass (SpyreModels and
SpyreCaches) spread over the default resync period, and as measured, with the reads the
API server counted meanwhile, by verb and resource.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from operator_harness import TIMEOUT, Bench, ms, pct, wait

from spyre_devcluster import simulate
from spyre_operator.kube.client import KINDS
from spyre_operator.settings import Settings

MANAGED = {"app.kubernetes.io/managed-by": "spyre-operator"}


def scale(bench: Bench, models: int, others: int, burst: int, resync: float) -> None:
    """The scale mode (the module's docstring)."""
    # Unrelated objects, then one labelled Pod, Job and PVC: once those three arrived,
    # anything the API server sent of the others (in order, per kind) arrived too.
    spaces = [bench.namespace(f"other-{i}") for i in range(10)]
    half, claims = others // 2, others // 10
    kinds = ["Pod"] * half + ["Job"] * (others - half) + ["PersistentVolumeClaim"] * claims
    objects = [
        simulate.unrelated_object(kind, spaces[i % 10], f"u{i}", {"a": "b"})
        for i, kind in enumerate(kinds)
    ]
    before, started = bench.received(), time.monotonic()
    bench.post_all(objects)
    posted = time.monotonic() - started
    markers = ("Pod", "Job", "PersistentVolumeClaim")
    bench.post_all(
        simulate.unrelated_object(kind, spaces[0], "marker", MANAGED) for kind in markers
    )
    wait(lambda: bench.received() >= before + 3, "the three labelled objects")
    got = bench.received() - before - 3
    print(f"{len(objects)} unrelated Pods/Jobs/PVCs posted in {posted:.0f} s ", end="")
    print(f"({len(objects) / posted:.0f}/s); objects the watches received of them: {got:.0f}")

    raw = bench.raw_creates(bench.namespace("raw"), burst)
    print(f"raw Job create x{burst} in a row: {sum(raw):6.2f} s in all   {ms(raw)}", flush=True)
    timings = bench.burst(burst)
    timings.report(f"burst {burst}")
    p95 = pct(timings.from_sent, 0.95)
    print(f"burst {burst}: create -> Job p95 {p95:.2f} s = {p95 / sum(raw):.2f} x the raw POSTs")

    first, started = time.monotonic(), time.monotonic()
    spaces = [bench.namespace(f"scale-{n}") for n in range((models - burst + 999) // 1000)]
    docs = [bench.model(spaces[(i - burst) // 1000], i) for i in range(burst, models)]
    bench.post_all(docs)
    created = time.monotonic() - first
    jobs = 'spyre_operator_api_requests_total{verb="POST",kind="Job"}'
    long = max(TIMEOUT, 0.2 * models)  # a loaded 2-core machine: 10,000 took 685 s once
    wait(lambda: bench.metrics().get(jobs, 0) >= models, f"{models} compile Jobs", long)
    print(
        f"{len(docs)} more SpyreModels posted in {created:.0f} s, all {models} with their "
        f"Job {time.monotonic() - started:.0f} s after the first POST"
    )
    print(
        f"operator RSS with {models} SpyreModels: {bench.peak_rss_mb('VmRSS'):.0f} MB "
        f"(peak {bench.peak_rss_mb():.0f} MB)",
        flush=True,
    )

    # Each model's inventory entry, made by the work queue's low lane once the burst is
    # over: an idle operator has them all.
    wait(lambda: caches(bench) >= models, f"{models} inventory entries", long)
    print(
        f"all {models} inventory entries {time.monotonic() - started:.0f} s after the first "
        f"POST; operator RSS with them: {bench.peak_rss_mb('VmRSS'):.0f} MB "
        f"(peak {bench.peak_rss_mb():.0f} MB)",
        flush=True,
    )
    # A pass reconciles every SpyreModel and SpyreCache.
    keys = models + caches(bench)
    print(f"{not_ready(bench)} of {models} SpyreModels not Ready; {keys - models} SpyreCaches")
    seconds = resync
    delta, server_reads = bench.resync_window(seconds)
    writes, reads = (
        delta["spyre_operator_api_writes_total"],
        delta["spyre_operator_api_reads_total"],
    )
    reconciles = delta["spyre_operator_reconciles_total"]
    per = (reads + writes) / reconciles
    print(
        f"idle resync, {reconciles:.0f} reconciles: {writes:.0f} API writes "
        f"({writes / reconciles:.3f} per reconcile), {reads:.0f} reads: {per:.3f} requests "
        f"per reconcile, {per * keys:.0f} per pass of {keys} = "
        f"{per * keys / Settings().resync_seconds:.1f}/s spread over the default "
        f"{Settings().resync_seconds:g} s period; measured {(reads + writes) / seconds:.0f}/s "
        f"({reconciles / seconds:.0f} reconciles/s)"
    )
    print(f"  the API server's reads meanwhile (all clients): {server_reads}")
    last = bench.metrics()
    if delta.get("spyre_operator_resync_passes_total"):
        queued, took = (last[f"spyre_operator_resync_pass_{k}"] for k in ("objects", "seconds"))
        print(
            f"  the last full pass: {queued:.0f} objects queued over {took:.0f} s of its "
            f"{seconds:g} s period ({queued / took:.0f}/s)"
        )
    else:
        print(f"  no resync pass ended in the {seconds:g} s window (a pass overran it)")
    print(
        f"operator RSS after the idle window: {bench.peak_rss_mb('VmRSS'):.0f} MB "
        f"(peak {bench.peak_rss_mb():.0f} MB)"
    )
    wrote = {k: v for k, v in delta.items() if k.startswith("spyre_operator_api_requests") and v}
    if wrote:
        print(f"  the writes: {wrote}")


def caches(bench: Bench) -> int:
    """How many SpyreCaches exist: one item and the count of the rest (a LIST of 10,000
    at once timed out at 30 s on a loaded API server)."""
    page = bench.kube.request("GET", f"/{'/'.join(KINDS['SpyreCache'])}", query={"limit": "1"})
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


def listed(bench: Bench, kind: str) -> Iterator[dict[str, Any]]:
    """Every object of a kind, 500 at a time."""
    token = ""
    while True:
        query = {"limit": "500"} | ({"continue": token} if token else {})
        page = bench.kube.request("GET", f"/{'/'.join(KINDS[kind])}", query=query)
        yield from page["items"]
        token = page["metadata"].get("continue") or ""
        if not token:
            return


def not_ready(bench: Bench) -> int:
    """SpyreModels whose Ready condition is not True (here: every one, as no pod runs)."""
    return sum(
        not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (m.get("status") or {}).get("conditions") or []
        )
        for m in listed(bench, "SpyreModel")
    )
