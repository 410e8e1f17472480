"""Operator benchmark (not a test): latency, idle writes and memory on a local control plane.

    .venv/bin/python benchmarks/operator_bench.py [--singles 10] [--sizes 50 200]
                                                  [--rss-models 1000]

Starts its own control plane and `spyre-operator run` (a subprocess), then prints:
- a raw Job create (POST round trip) on the same API server, as the yardstick;
- create -> Job: from the SpyreModel POST to the compile Job appearing in a watch, for
  --singles SpyreModels created one at a time and for bursts of each of --sizes;
- JobComplete -> Deployment: from the Job's status update to the Deployment appearing;
  (median and p95; every SpyreModel with its own cache key);
- API writes per idle reconcile (the operator's own counter, over full resync passes);
- the operator's peak RSS with --rss-models SpyreModels: the burst namespaces are deleted
  and the operator restarted first, so its whole life saw exactly that many.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from spyre_operator.api.crd import build_crd
from spyre_operator.api.names import CRD_NAME
from spyre_operator.api.validation import parse
from spyre_operator.local.controlplane import ControlPlane, free_port
from spyre_operator.reconcile import simulate
from spyre_operator.reconcile.kube import ApiError, Kube, load_api_client
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import build_compile_job
from spyre_operator.render.meta import compile_job_name

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "micro-granite-cpu.yaml"
TIMEOUT = 600.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(values: list[float]) -> str:
    median, p95 = statistics.median(values) * 1000, pct(values, 0.95) * 1000
    return f"median {median:7.1f} ms   p95 {p95:7.1f} ms"


def wait(probe: Any, what: str, timeout: float = TIMEOUT) -> Any:
    return simulate.poll_until(probe, what, timeout)


class Seen(threading.Thread):
    """Records when each object of one kind first appears in a namespace (a watch)."""

    def __init__(self, api: client.ApiClient, kind: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.lister = {
            "Job": client.BatchV1Api(api).list_namespaced_job,
            "Deployment": client.AppsV1Api(api).list_namespaced_deployment,
        }[kind]
        self.namespace, self.times, self.ready = namespace, {}, threading.Event()
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


class Bench:
    def __init__(self, directory: Path) -> None:
        self.plane = ControlPlane(directory / "plane")
        self.plane.up()
        self.api = load_api_client(str(self.plane.kubeconfig))
        self.kube = Kube(self.api)
        try:
            self._install_crd()
        except BaseException:
            self.plane.down()
            raise
        self.log = directory / "operator.log"
        self.port = free_port()
        self.operator: subprocess.Popen[bytes] | None = None
        self.doc = yaml.safe_load(EXAMPLE.read_text())

    def _install_crd(self) -> None:
        url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
        self.kube.request(
            "PATCH",
            url,
            build_crd(),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "bench", "force": "true"},
        )
        wait(
            lambda: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in self.kube.request("GET", url).get("status", {}).get("conditions") or []
            ),
            "CRD",
        )

    def start_operator(self, resync: float) -> None:
        env = os.environ | {"KUBECONFIG": str(self.plane.kubeconfig)}
        cmd = [
            sys.executable,
            "-m",
            "spyre_operator",
            "run",
            "--metrics-port",
            str(self.port),
            "--resync-seconds",
            str(resync),
        ]
        with self.log.open("ab") as out:
            self.operator = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        wait(self._metrics_or_none, "operator metrics")

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.terminate()
            self.operator.wait(timeout=60)
            self.operator = None

    def _metrics_or_none(self) -> dict[str, float] | None:
        try:
            return self.metrics()
        except OSError:
            return None

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            lines = r.read().decode().splitlines()
        return {k: float(v) for k, _, v in (line.rpartition(" ") for line in lines)}

    def peak_rss_mb(self) -> float:
        assert self.operator is not None
        for line in Path(f"/proc/{self.operator.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def namespace(self, name: str) -> str:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.kube.request("POST", "/api/v1/namespaces", body)
        simulate.ensure_service_account(self.kube, name)
        return name

    def model(self, namespace: str, i: int) -> dict[str, Any]:
        doc = yaml.safe_load(yaml.safe_dump(self.doc))
        doc["metadata"] = {"name": f"m{i:04d}", "namespace": namespace}
        doc["spec"]["model"]["revision"] = f"rev{i:04d}"  # its own cache key
        return doc

    def raw_creates(self, namespace: str, count: int) -> list[float]:
        spec = parse(self.model(namespace, 0)).spec
        out = []
        for i in range(count):
            job = build_compile_job(spec, namespace)
            job["metadata"]["name"] = f"raw-{i}"
            job["metadata"]["labels"] = {"bench": "raw"}
            started = time.monotonic()
            self.kube.create(job)
            out.append(time.monotonic() - started)
        return out

    def burst(self, size: int, name: str = "") -> tuple[list[float], list[float]]:
        ns = self.namespace(name or f"burst-{size}")
        docs = [self.model(ns, i) for i in range(size)]
        jobs = {d["metadata"]["name"]: compile_job_name(cache_key(parse(d).spec)) for d in docs}
        job_seen, deploy_seen = Seen(self.api, "Job", ns), Seen(self.api, "Deployment", ns)
        for seen in (job_seen, deploy_seen):
            seen.start()
            seen.ready.wait()
        time.sleep(1.0)  # let the watches connect before the burst
        created: dict[str, float] = {}
        for doc in docs:
            created[doc["metadata"]["name"]] = time.monotonic()
            self.kube.create(doc)
        wait(lambda: len(job_seen.times) >= size, f"{size} Jobs")
        to_job = [job_seen.times[jobs[n]] - t for n, t in created.items()]
        completed: dict[str, float] = {}
        for name, job in jobs.items():
            simulate.complete_job(self.kube, ns, job)
            completed[name] = time.monotonic()
        wait(lambda: len(deploy_seen.times) >= size, f"{size} Deployments")
        to_deploy = [deploy_seen.times[n] - t for n, t in completed.items()]
        job_seen.stop()
        deploy_seen.stop()
        return to_job, to_deploy

    def idle_writes(self) -> tuple[float, float]:
        """(writes, reconciles) over idle resync passes."""
        before = self.metrics()
        wait(
            lambda: (
                self.metrics()["spyre_operator_reconciles_total"]
                >= before["spyre_operator_reconciles_total"] + 400
            ),
            "idle passes",
        )
        after = self.metrics()
        writes = (
            after["spyre_operator_api_writes_total"] - before["spyre_operator_api_writes_total"]
        )
        passes = (
            after["spyre_operator_reconciles_total"] - before["spyre_operator_reconciles_total"]
        )
        return writes, passes

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

    def close(self) -> None:
        self.stop_operator()
        self.plane.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--singles", type=int, default=10, help="single creates, one at a time")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--rss-models", type=int, default=1000)
    parser.add_argument("--resync", type=float, default=20.0, help="resync seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="operator-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start_operator(args.resync)
            raw = bench.raw_creates(bench.namespace("raw"), 50)
            print(f"raw Job create (POST round trip, n=50):     {ms(raw)}", flush=True)
            singles = [bench.burst(1, f"single-{i}") for i in range(args.singles)]
            to_job = [t for s, _ in singles for t in s]
            to_deploy = [t for _, s in singles for t in s]
            print(f"single x{args.singles:3d}: create -> Job       {ms(to_job)}", flush=True)
            print(f"single x{args.singles:3d}: JobComplete -> Deploy {ms(to_deploy)}", flush=True)
            for size in args.sizes:
                to_job, to_deploy = bench.burst(size)
                print(f"burst {size:4d}: create -> Job              {ms(to_job)}", flush=True)
                print(f"burst {size:4d}: JobComplete -> Deployment  {ms(to_deploy)}", flush=True)
            writes, passes = bench.idle_writes()
            print(
                f"idle: {writes:.0f} API writes in {passes:.0f} reconciles "
                f"({writes / passes:.3f} per reconcile)",
                flush=True,
            )
            names = [f"single-{i}" for i in range(args.singles)]
            bench.delete_namespaces(names + [f"burst-{size}" for size in args.sizes])
            rss = bench.memory(args.rss_models, args.resync)
            print(f"operator peak RSS with {args.rss_models} SpyreModels: {rss:.0f} MB")
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
