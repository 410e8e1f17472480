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

The scale mode instead (a cluster-wide operator, as the chart's default), each figure
beside its yardstick from the same run: the objects the operator's watches received for
--unrelated Pods and Jobs (half each, and a tenth as many PVCs) in namespaces of their
own (the API server filters them out: 0); create -> Job for a burst of --burst
SpyreModels created back to back, beside the time of as many raw Job POSTs in a row; then
SpyreModels up to --scale (created 16 at a time, each with its own compile Job), the
operator's RSS with them, and again once each has its inventory entry (made by the work
queue's low lane after the burst); and the reconciles of one --resync period of resync passes
once the operator is idle (a period after it made its last write), with its SpyreModels
not Ready (the compile Jobs of the burst's are
completed, their Deployments never become available; the others' never finish): writes
per reconcile and API requests (reads and writes) per reconcile, as the rate of a whole
pass (SpyreModels and SpyreCaches) spread over the default resync period, and as
measured, with the reads the API server counted meanwhile, by verb and resource.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from spyre_devcluster import simulate
from spyre_devcluster.controlplane import ControlPlane, free_port
from spyre_devcluster.operator_process import OperatorProcess
from spyre_operator.api.validation import parse
from spyre_operator.controller import metrics_server
from spyre_operator.kube.client import KINDS, ApiError, Kube, load_api_client
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import build_compile_job
from spyre_operator.render.meta import compile_job_name
from spyre_operator.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "micro-granite-cpu.yaml"
TIMEOUT = 600.0
QUIET = 3.0  # seconds without an operator write before the idle window starts
GAP = 1.0  # seconds between single creates (and between the raw creates they compare to)
# A /metrics scrape: under load (25 on 2 cores) one can take longer than its timeout; it is
# tried again, each time waiting longer, rather than ending the phase.
SCRAPE_TIMEOUT = 5.0
SCRAPE_TRIES = 4
READ_KINDS = {plural for _, plural in KINDS.values()}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(values: list[float]) -> str:
    median, p95 = statistics.median(values) * 1000, pct(values, 0.95) * 1000
    return f"median {median:7.1f} ms   p95 {p95:7.1f} ms"


def wait(probe: Any, what: str, timeout: float = TIMEOUT) -> Any:
    return simulate.poll_until(probe, what, timeout)


def read_metrics(port: int) -> dict[str, float]:
    """The operator's metrics; a scrape that times out is tried again, waiting longer
    each time (SCRAPE_TRIES in all); anything else (not listening yet) raises at once."""
    for attempt in range(1, SCRAPE_TRIES):
        try:
            return scrape(port, SCRAPE_TIMEOUT * attempt)
        except (TimeoutError, urllib.error.URLError) as err:
            if not isinstance(getattr(err, "reason", err), TimeoutError):
                raise
            print(f"  (a /metrics scrape timed out after {SCRAPE_TIMEOUT * attempt:g} s)")
    return scrape(port, SCRAPE_TIMEOUT * SCRAPE_TRIES)


def scrape(port: int, timeout: float) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return metrics_server.parse(r.read().decode())


class Seen(threading.Thread):
    """Records when each object of one kind first appears in a namespace (a watch)."""

    def __init__(self, api: client.ApiClient, kind: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.lister = {
            "Job": client.BatchV1Api(api).list_namespaced_job,
            "Deployment": client.AppsV1Api(api).list_namespaced_deployment,
        }[kind]
        self.namespace, self.ready = namespace, threading.Event()
        self.times: dict[str, float] = {}
        self.watch = watch.Watch()

    def run(self) -> None:
        self.ready.set()
        try:
            for event in self.watch.stream(self.lister, self.namespace, timeout_seconds=3600):
                name = event["object"].metadata.name
                self.times.setdefault(name, time.monotonic())
        except ProtocolError:  # the connection closes when the benchmark stops the watch
            return

    def stop(self) -> None:
        self.watch.stop()


class Timings:
    """Per SpyreModel: create -> Job, from the POST sent and from the API server's answer
    (the SpyreModel exists), and JobComplete -> Deployment."""

    def __init__(self) -> None:
        self.from_sent: list[float] = []
        self.from_answer: list[float] = []
        self.to_deploy: list[float] = []

    def add(
        self, sent: float, answered: float, job: float, completed: float, deploy: float
    ) -> None:
        self.from_sent.append(job - sent)
        self.from_answer.append(job - answered)
        self.to_deploy.append(deploy - completed)

    def __iadd__(self, other: Timings) -> Timings:
        self.from_sent += other.from_sent
        self.from_answer += other.from_answer
        self.to_deploy += other.to_deploy
        return self

    def report(self, label: str) -> None:
        print(f"{label}: create -> Job, from the answer   {ms(self.from_answer)}")
        print(f"{label}: create -> Job, from the POST     {ms(self.from_sent)}")
        print(f"{label}: JobComplete -> Deployment       {ms(self.to_deploy)}", flush=True)


class Bench:
    def __init__(self, directory: Path) -> None:
        self.plane = ControlPlane(directory / "plane")
        self.plane.up()
        self.api = load_api_client(str(self.plane.kubeconfig))
        self.kube = Kube(self.api)
        try:
            simulate.install_crds(self.kube, TIMEOUT)
        except BaseException:
            self.plane.down()
            raise
        self.log = directory / "operator.log"
        self.port = free_port()
        self.operator: OperatorProcess | None = None
        self.doc = yaml.safe_load(EXAMPLE.read_text())

    def start_operator(self, resync: float) -> None:
        args = ["run", "--metrics-port", str(self.port), "--resync-seconds", str(resync)]
        args += ["--max-compiles", "0"]  # bursts of compile Jobs at once: no queue
        self.operator = OperatorProcess(args, self.plane.kubeconfig, self.log)
        wait(self._metrics_or_none, "operator metrics")

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop(timeout=60)
            self.operator = None

    def _metrics_or_none(self) -> dict[str, float] | None:
        try:
            return self.metrics()
        except OSError:
            return None

    def metrics(self) -> dict[str, float]:
        return read_metrics(self.port)

    def peak_rss_mb(self, field: str = "VmHWM") -> float:
        """The operator's peak RSS (VmRSS: its RSS now)."""
        assert self.operator is not None
        for line in Path(f"/proc/{self.operator.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def post_all(self, objects: Iterable[dict[str, Any]], threads: int = 16) -> None:
        """Create every object, `threads` POSTs at a time."""
        with ThreadPoolExecutor(threads) as pool:
            for _ in pool.map(self.kube.create, objects):
                pass

    def received(self) -> float:
        """Objects the operator's watches of the children received, all kinds."""
        name = "spyre_operator_watch_events_total"
        return sum(v for k, v in self.metrics().items() if k.startswith(name))

    def namespace(self, name: str) -> str:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.kube.request("POST", "/api/v1/namespaces", body)
        simulate.ensure_service_account(self.kube, name)
        return name

    def model(self, namespace: str, i: int) -> dict[str, Any]:
        doc = yaml.safe_load(yaml.safe_dump(self.doc))
        doc["metadata"] = {"name": f"m{i:04d}", "namespace": namespace}
        # Its own cache key; a hostPath model: create -> compile Job, no weights step.
        doc["spec"]["model"] = {
            "id": doc["spec"]["model"]["id"],
            "path": "/models/m",
            "source": {"hostPath": {"path": f"/srv/models/m{i:04d}"}},
        }
        return doc

    def raw_creates(self, namespace: str, count: int, gap: float = 0.0) -> list[float]:
        """POST round trips of compile Jobs, back to back or `gap` seconds apart."""
        spec = parse(self.model(namespace, 0)).spec
        out = []
        for i in range(count):
            job = build_compile_job(spec, namespace)
            job["metadata"]["name"] = f"raw-{gap:g}-{i}".replace(".", "-")
            job["metadata"]["labels"] = {"bench": "raw"}
            started = time.monotonic()
            self.kube.create(job)
            out.append(time.monotonic() - started)
            time.sleep(gap)
        return out

    def watching(self, namespace: str) -> tuple[Seen, Seen]:
        job_seen, deploy_seen = (
            Seen(self.api, "Job", namespace),
            Seen(self.api, "Deployment", namespace),
        )
        for seen in (job_seen, deploy_seen):
            seen.start()
            seen.ready.wait()
        time.sleep(1.0)  # let the watches connect
        return job_seen, deploy_seen

    def create(self, doc: dict[str, Any]) -> tuple[float, float]:
        """Create a SpyreModel: (when the POST was sent, when the API server answered)."""
        sent = time.monotonic()
        self.kube.create(doc)
        return sent, time.monotonic()

    def singles(self, namespace: str, first: int, count: int, gap: float) -> Timings:
        """SpyreModels one at a time, `gap` seconds apart, each to its Deployment."""
        timings = Timings()
        job_seen, deploy_seen = self.watching(namespace)
        for i in range(first, first + count):
            doc = self.model(namespace, i)
            name, job = doc["metadata"]["name"], compile_job_name(cache_key(parse(doc).spec))
            sent, answered = self.create(doc)
            wait(lambda j=job: j in job_seen.times, f"Job {job}")
            simulate.complete_job(self.kube, namespace, job)
            completed = time.monotonic()
            wait(lambda n=name: n in deploy_seen.times, f"Deployment {name}")
            timings.add(sent, answered, job_seen.times[job], completed, deploy_seen.times[name])
            time.sleep(gap)
        job_seen.stop()
        deploy_seen.stop()
        return timings

    def burst(self, size: int) -> Timings:
        ns = self.namespace(f"burst-{size}")
        docs = [self.model(ns, i) for i in range(size)]
        jobs = {d["metadata"]["name"]: compile_job_name(cache_key(parse(d).spec)) for d in docs}
        job_seen, deploy_seen = self.watching(ns)
        before = self.metrics()
        created = {doc["metadata"]["name"]: self.create(doc) for doc in docs}
        wait(lambda: len(job_seen.times) >= size, f"{size} Jobs")
        self.requests_per_model(before, size)
        completed: dict[str, float] = {}
        for name, job in jobs.items():
            simulate.complete_job(self.kube, ns, job)
            completed[name] = time.monotonic()
        wait(lambda: len(deploy_seen.times) >= size, f"{size} Deployments")
        timings = Timings()
        for name, (sent, answered) in created.items():
            job_at, deploy_at = job_seen.times[jobs[name]], deploy_seen.times[name]
            timings.add(sent, answered, job_at, completed[name], deploy_at)
        job_seen.stop()
        deploy_seen.stop()
        return timings

    def requests_per_model(self, before: dict[str, float], size: int) -> None:
        """What the operator did until the burst's last Job appeared, per SpyreModel: its
        reconciles, reads, writes and dry runs by kind (what competes with the Jobs)."""
        after = self.metrics()
        counted = ("reconciles_total", "api_reads_total", "api_requests_total", "dry_runs_total")
        parts = []
        for sample, value in sorted(after.items()):
            name = sample.removeprefix("spyre_operator_")
            if name.startswith(counted) and value > before.get(sample, 0.0):
                labels = ",".join(re.findall(r'="([^"]*)"', name))
                what = name.split("{")[0].removesuffix("_total") + (f" {labels}" if labels else "")
                parts.append(f"{what} {(value - before.get(sample, 0.0)) / size:.2f}")
        print(f"burst {size}, until its last Job, per SpyreModel: " + "; ".join(parts), flush=True)

    def api_reads(self) -> dict[str, float]:
        """GETs and LISTs the API server has answered, by "VERB resource", of the kinds the
        operator reads (its watches are WATCHes, not counted)."""
        _, url, headers, _, _ = self.api.param_serialize(
            method="GET", resource_path="/metrics", auth_settings=["BearerToken"]
        )
        text = self.api.call_api("GET", url, header_params=headers).read().decode()
        out: dict[str, float] = {}
        for sample, value in metrics_server.parse(text).items():
            if not sample.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', sample))
            if labels.get("verb") in ("GET", "LIST") and labels.get("resource") in READ_KINDS:
                key = f"{labels['verb']} {labels['resource']}"
                out[key] = out.get(key, 0.0) + value
        return out

    def idle_writes(self) -> tuple[float, float, dict[str, float], dict[str, float]]:
        """(writes, reconciles, writes by request, reads by request) over idle resync
        passes, counted once the operator has finished what the bursts left it (its
        Events, late status updates): no write for QUIET seconds."""
        self.wait_quiet()
        before, reads_before = self.metrics(), self.api_reads()
        wait(
            lambda: (
                self.metrics()["spyre_operator_reconciles_total"]
                >= before["spyre_operator_reconciles_total"] + 400
            ),
            "idle passes",
        )
        after, reads = self.metrics(), self.api_reads()
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

    def delete_namespaces(self, names: list[str]) -> None:
        for name in names:
            self.kube.request("DELETE", f"/api/v1/namespaces/{name}")
            # No pvc-protection controller on the local control plane: release the claims.
            for claim in self.kube.request(
                "GET", f"/api/v1/namespaces/{name}/persistentvolumeclaims"
            )["items"]:
                nofinalizers = {"metadata": {"finalizers": None}}
                self.kube.patch(
                    "PersistentVolumeClaim", name, claim["metadata"]["name"], nofinalizers
                )
        wait(
            lambda: not any(self._exists(f"/api/v1/namespaces/{name}") for name in names),
            "namespaces deleted",
        )

    def _exists(self, url: str) -> bool:
        try:
            self.kube.request("GET", url)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return True

    def memory(self, count: int, resync: float) -> float:
        """Peak RSS of a fresh operator over its life with exactly `count` SpyreModels."""
        self.stop_operator()
        self.start_operator(resync)
        ns = self.namespace("rss")
        for i in range(count):
            self.kube.create(self.model(ns, i))
        wait(
            lambda: len(self.kube.list("Job", ns, "app.kubernetes.io/component=compile")) >= count,
            f"{count} Jobs",
        )
        before = self.metrics()["spyre_operator_reconciles_total"]
        wait(
            lambda: self.metrics()["spyre_operator_reconciles_total"] >= before + count,
            "one resync pass",
        )
        return self.peak_rss_mb()

    def resync_window(self, seconds: float) -> tuple[dict[str, float], dict[str, float]]:
        """The operator's counter deltas and the API server's reads (api_reads) over
        `seconds` of resync passes of an idle operator: from QUIET seconds without a
        write on, and once as long again has passed (what the last changes queued, each
        with its GET, is done by then)."""
        self.wait_quiet()
        time.sleep(seconds)
        before, reads_before = self.metrics(), self.api_reads()
        time.sleep(seconds)
        after, reads = self.metrics(), self.api_reads()
        delta = {k: after[k] - before.get(k, 0.0) for k in after}
        read = {k: v - reads_before.get(k, 0.0) for k, v in reads.items()}
        return delta, {k: v for k, v in read.items() if v}

    def wait_quiet(self) -> None:
        """Until the operator has made no write for QUIET seconds."""
        last, quiet_since = -1.0, time.monotonic()
        while time.monotonic() - quiet_since < QUIET:
            writes = self.metrics()["spyre_operator_api_writes_total"]
            if writes != last:
                last, quiet_since = writes, time.monotonic()
            time.sleep(0.2)

    def close(self) -> None:
        self.stop_operator()
        self.plane.down()


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
            writes, passes, by_request, reads = bench.idle_writes()
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
            bench.delete_namespaces(names + [f"burst-{size}" for size in args.sizes])
            rss = bench.memory(args.rss_models, args.resync)
            print(f"operator peak RSS with {args.rss_models} SpyreModels: {rss:.0f} MB")
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
