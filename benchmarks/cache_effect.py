"""What the shared compiled-graph cache buys (a script, not a test), on the real node.

    .venv/bin/python benchmarks/cache_effect.py [--runs 3] [--backend inductor] [--logs DIR]

Brings the node up, installs the operator with its chart, applies the tiny CPU
SpyreModel and times apply -> Ready (the first deploy: compile Job, then serving). Then,
with the model scaled to zero, it starts bare serving pods from the operator's own pod
template, alternating two kinds, `--runs` of each:
  cached     the template as rendered: the cache volume with the key's compiled graphs;
  compiling  the same template with an empty cache (an emptyDir instead of the volume)
             and the require-precompiled switch off, so vLLM compiles at start-up.
  bare       the same serve command, env and cache as `cached`, run as a plain process on
             the node (the host) from the CPU runtime venv the image was made from
             (scripts/runtime-env) with this checkout's spyre_runtime: the pod's paths
             mapped to the host folders of its volumes (TMPDIR its /tmp's), no
             container, no probe (Ready is its first /health answer): the physical
             limit of a cached pod's start.
For each: create (the pod's POST, the process's start) -> Ready (the pod's readiness
probe, seen by a watch; the bare process's first /health, asked every 0.1 s) and create
-> first completion (asked at the pod's IP), and where the start-up went: the phases
between milestones of its own log (`kubectl logs --timestamps`; the bare process's lines
stamped as read; see PHASES) and the seconds spent in torch.compile (its compile
report). Prints every run, then median, spread and the ratios compiling / cached and
cached / bare, and the median of each phase; with --logs, each start's stamped log is
kept there. Needs root and `spyre-operator cluster install --node`; takes the node down
at the end.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))
from rtlib import REPO, stop

from spyre_devcluster import node_operator, preflight
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.images import recipes
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.node import Node
from spyre_devcluster.simulate import poll_until
from spyre_runtime import compilereport, contract

WAIT = 1800
NAMESPACE = "default"
KINDS = ("cached", "compiling", "bare")
# Start-up phases: each ends at the first log line matching its pattern (both flavours'
# plugins, vLLM 0.17 and 0.28), or at Ready; it starts where the one before ended, the
# first at the pod's creation. A milestone not found folds its phase into the next.
PHASES: tuple[tuple[str, str | None], ...] = (
    ("container start", r"spyre-runtime INFO"),  # serve's first line: the pod runs
    ("imports", r"non-default args"),  # vLLM imported, its API server being set up
    ("engine config", r"Initializing a V1 LLM engine"),  # the engine core's first line
    ("engine start", r"load model\.\.\."),  # the engine core's set-up, the plugin's worker
    ("weights load", r"load model took"),
    ("engine setup", r"\[WARMUP\]"),  # KV cache, the warmup's first step
    ("warmup: trace, compile or cache load", compilereport.WARMUP_DONE),
    ("server start", r"Application startup complete"),
    ("readiness", None),  # the readiness probe saw it
)


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


Lines = list[tuple[float, str]]  # (epoch seconds, text) of each log line


def _timestamp(line: str) -> tuple[float, str] | None:
    """(epoch seconds, text) of a `kubectl logs --timestamps` line (RFC 3339, nanoseconds)."""
    stamp, _, text = line.partition(" ")
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if found is None:
        return None
    whole, fraction, zone = found.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return seconds + float(f"0.{fraction or 0}"), text


def stamped(log: str) -> Lines:
    """The lines of `kubectl logs --timestamps`."""
    return [found for line in log.splitlines() if (found := _timestamp(line))]


def phases(lines: Lines, created: float, ready: float) -> dict[str, float | None]:
    """Seconds of each of PHASES in a start's stamped log lines (created and ready: epoch
    seconds); None for a milestone the log lacks (its time goes to the next phase)."""
    result: dict[str, float | None] = {}
    previous = created
    for name, pattern in PHASES:
        if pattern is None:
            at: float | None = ready
        else:
            at = next((t for t, text in lines if t >= previous and re.search(pattern, text)), None)
        if at is None:
            result[name] = None
            continue
        result[name] = at - previous
        previous = at
    return result


@dataclass
class Start:
    to_ready: float
    to_answer: float
    phases: dict[str, float | None]
    compile_seconds: float  # in torch.compile, engine core (trace and compile or load)
    log: str  # the start's output, each line stamped (kubectl's RFC 3339, or epoch seconds)


class ReadyWatch(threading.Thread):
    """When the API server first says a pod is Ready or Failed: a watch, each change
    stamped as it arrives. A poll (a kubectl run every 0.5 s) added its interval and a
    kubectl start to each pod's figure, which the bare process, polled in-process every
    0.1 s, did not pay."""

    def __init__(self, core: client.CoreV1Api, name: str) -> None:
        super().__init__(daemon=True)
        self.core, self.name, self.watch = core, name, watch.Watch()
        self.seen: tuple[float, dict[str, Any]] | None = None

    def run(self) -> None:
        # A watch from no version starts with the pod as it is: nothing is missed if the
        # create comes first.
        selector = f"metadata.name={self.name}"
        stream = self.watch.stream(
            self.core.list_namespaced_pod, NAMESPACE, field_selector=selector, timeout_seconds=WAIT
        )
        for event in stream:
            pod = event["raw_object"]
            if is_ready(pod) or pod.get("status", {}).get("phase") == "Failed":
                self.seen = (time.monotonic(), pod)
                self.watch.stop()


def time_pod(cluster: Kubectl, core: client.CoreV1Api, doc: dict[str, Any]) -> Start:
    """Seconds from create (the POST) to Ready and to the first completion at the pod's
    IP, and where the start-up went."""
    name = doc["metadata"]["name"]
    ready = ReadyWatch(core, name)
    ready.start()
    started = time.monotonic()
    created = time.time()
    core.create_namespaced_pod(NAMESPACE, doc)  # type: ignore[arg-type]  # a dict is sent as is
    at, pod = poll_until(lambda: ready.seen, f"{name} Ready", WAIT, interval=0.1)
    if not is_ready(pod):
        raise RuntimeError(f"{name} failed: {cluster('logs', name)[-3000:]}")
    to_ready = at - started
    ready_at = time.time() - (time.monotonic() - at)
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    node_operator.complete(pod["status"]["podIP"], port, "Hello", timeout=120)
    to_answer = time.monotonic() - started
    log = cluster("logs", "--timestamps", name)
    warmed = contract.startup(log).values()
    cluster("delete", "pod", name, "--wait=true", "--timeout=120s")
    compile_seconds = sum(r.compile_ms for r in warmed) / 1000
    found = phases(stamped(log), created, ready_at)
    return Start(to_ready, to_answer, found, compile_seconds, log)


class HostPaths:
    """The host folders a pod's volumes are on this node: hostPath volumes, claims bound
    to hostPath volumes, and a fresh folder for each emptyDir."""

    def __init__(self, cluster: Kubectl, spec: dict[str, Any], scratch: Path) -> None:
        (container,) = spec["containers"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.mounts: list[tuple[str, Path]] = []
        for mount in container["volumeMounts"]:
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                host = Path(volume["hostPath"]["path"])
            elif "persistentVolumeClaim" in volume:
                claim = cluster.get(f"pvc/{volume['persistentVolumeClaim']['claimName']}")
                pv = cluster.get(f"pv/{claim['spec']['volumeName']}")
                host = Path(pv["spec"]["hostPath"]["path"])
            elif "emptyDir" in volume:
                host = Path(tempfile.mkdtemp(prefix=f"{mount['name']}-", dir=scratch))
            else:
                raise ValueError(f"volume {mount['name']}: no host folder for {volume}")
            self.mounts.append((mount["mountPath"], host / mount.get("subPath", "")))
        self.mounts.sort(key=lambda m: -len(m[0]))  # the longest mount path wins

    def __call__(self, value: str) -> str:
        """`value` with a path inside the pod's mounts mapped to the host."""
        for inside, host in self.mounts:
            if value == inside or value.startswith(inside + "/"):
                return str(host) + value[len(inside) :]
        return value


def time_bare(cluster: Kubectl, template: dict[str, Any], venv: Path, scratch: Path) -> Start:
    """The cached pod's serve command as a process on the host, with the pod's env (paths
    mapped to its volumes' host folders, a free port: the host's network is shared)."""
    (container,) = template["spec"]["containers"]
    host = HostPaths(cluster, template["spec"], scratch)
    port = free_port()
    args = [host(a) for a in container["args"]]
    args[args.index("--port") + 1] = str(port)
    env = {e["name"]: host(e["value"]) for e in container["env"] if "value" in e}
    env |= {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "MASTER_PORT": str(free_port()),
        "SPYRE_SERVING_TERMINATION_LOG": str(scratch / "termination-log"),
        "PYTHONUNBUFFERED": "1",
        # the pod's temporary directory is its /tmp mount (an emptyDir): so is the bare
        # process's, not the host's /tmp with what earlier runs left there
        "TMPDIR": host("/tmp"),
        # this checkout's spyre_runtime, as in the image (the venv's editable install
        # points at whichever checkout ran scripts/runtime-env last)
        "PYTHONPATH": str(REPO / "image" / "src"),
    }
    lines: Lines = []
    started = time.monotonic()
    created = time.time()
    proc = subprocess.Popen(
        [str(venv / "bin" / "spyre-runtime"), *args],
        env=env,
        cwd=host(container["workingDir"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = proc.stdout
    assert output is not None

    def read() -> None:
        for line in output:
            lines.append((time.time(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"bare serve exited {proc.returncode}: {lines[-30:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    return True
            except OSError:
                return False

        poll_until(healthy, "the bare process healthy", WAIT, interval=0.1)
        to_ready = time.monotonic() - started
        ready_at = time.time()
        node_operator.complete("127.0.0.1", port, "Hello", timeout=120)
        to_answer = time.monotonic() - started
    finally:
        stop(proc)
        reader.join(30)
    warmed = contract.startup("".join(text for _, text in lines)).values()
    compile_seconds = sum(r.compile_ms for r in warmed) / 1000
    log = "".join(f"{at:.3f} {text}" for at, text in lines)
    return Start(to_ready, to_answer, phases(lines, created, ready_at), compile_seconds, log)


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):6.1f} s  (min {min(values):.1f}, max {max(values):.1f})"
    )


def measure(node: Node, folder: Path, runs: int, backend: str, logs: Path | None) -> None:
    venv = recipes.runtime_venv(node_operator.FLAVOUR)  # the serving image's, on the host
    cluster = Kubectl(node.kubeconfig, NAMESPACE)
    core = client.CoreV1Api(config.new_client_from_config(str(node.kubeconfig)))
    node_operator.push_images(node, print)
    node_operator.install_chart(node)
    node_operator.add_pull_secret(node, NAMESPACE)
    models = node_operator.make_tiny_model(folder / "models")
    model = node_operator.tiny_model(host_path=models)
    model["spec"]["backend"] = backend
    name = model["metadata"]["name"]
    started = time.monotonic()
    cluster("apply", "-f", "-", input=json.dumps(model))
    # kubectl's own timeout, and the subprocess's a little longer (Kubectl.wait)
    cluster.wait(f"sm/{name}", "jsonpath={.status.phase}=Ready", timeout=WAIT)
    first_deploy = time.monotonic() - started
    print(f"first deploy, apply -> Ready: {first_deploy:.1f} s", flush=True)
    template = cluster.get(f"deployment/{name}")["spec"]["template"]
    cluster("scale", f"sm/{name}", "--replicas=0")
    poll_until(
        lambda: not cluster.get(f"deployment/{name}")["status"].get("replicas"), "0", WAIT, 1.0
    )
    figures: dict[str, list[Start]] = {kind: [] for kind in KINDS}
    for run in range(1, runs + 1):
        for kind in KINDS:
            if kind == "bare":
                start = time_bare(cluster, template, venv, Path(tempfile.mkdtemp(dir=folder)))
            else:
                start = time_pod(cluster, core, bare_pod(template, f"{kind}-{run}", kind))
            figures[kind].append(start)
            if logs is not None:
                (logs / f"{kind}-{run}.log").write_text(start.log)
            print(
                f"run {run} {kind:9}: Ready {start.to_ready:6.1f} s, answer "
                f"{start.to_answer:6.1f} s; {breakdown(start)}",
                flush=True,
            )
    print(f"\nbackend {backend}, {runs} runs of each kind, pod create -> ...")
    for what in ("to_ready", "to_answer"):
        medians = {}
        for kind in KINDS:
            values = [getattr(f, what) for f in figures[kind]]
            medians[kind] = statistics.median(values)
            print(f"  {LABELS[what]:16} {kind:9} {summary(values)}")
        for over, under in (("compiling", "cached"), ("cached", "bare")):
            ratio = medians[over] / medians[under]
            print(f"  {LABELS[what]:16} ratio {over} / {under}: {ratio:.2f}x")
    print(f"\nstart-up phases, median seconds ({' | '.join(KINDS)}):")
    for name, _ in PHASES:
        cells = [median_of([f.phases[name] for f in figures[kind]]) for kind in KINDS]
        print(f"  {name:38} {' | '.join(cells)}")
    cells = [median_of([f.compile_seconds for f in figures[kind]]) for kind in KINDS]
    print(f"  {'of which in torch.compile':38} {' | '.join(cells)}")


LABELS = {"to_ready": "Ready", "to_answer": "first completion"}


def median_of(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):6.1f}" if known else "     ?"


def breakdown(start: Start) -> str:
    parts = [f"{name} {'?' if s is None else f'{s:.1f}'}" for name, s in start.phases.items()]
    return ", ".join(parts) + f" (torch.compile {start.compile_seconds:.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backend", default="inductor", help="the SpyreModel's CPU backend")
    parser.add_argument("--logs", type=Path, help="keep each start's log here (<kind>-<run>.log)")
    args = parser.parse_args()
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
    found = preflight.problems()
    if found:
        print(preflight.report(found), file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="cache-effect-") as tmp:
        node = Node(Path(tmp))
        try:
            node.up()
            measure(node, Path(tmp), args.runs, args.backend, args.logs)
        finally:
            node.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
