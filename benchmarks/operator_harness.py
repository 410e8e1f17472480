"""What benchmarks/operator_bench.py measures with: a local control plane and
`spyre-operator run`, its metrics (a scrape that times out is tried again), watches that
see when each Job and Deployment appears, and the phases both modes share."""

from __future__ import annotations

import re
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
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
from spyre_operator.kube.client import KINDS, Kube, load_api_client
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import build_compile_job
from spyre_operator.render.meta import compile_job_name

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
