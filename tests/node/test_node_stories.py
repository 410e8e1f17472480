"""The user stories, on the real node with real pods: the operator installed by its chart,
the project's own images, the tiny Granite made here (from a claim of the namespace, and
from a hub the test runs on the host), every namespace under Pod Security's restricted
profile.

The stories share one namespace (what one compiled, the next serves: the tier's time), and
each sets up what it needs there (`Cluster.serving`: the first model Ready, made if
missing), so any one passes alone or in any order: first deploy (in a namespace where
nothing was compiled), its key's graphs moved off by hand (the serving pod refuses at once
and the model says why), the images pulled from the node's registry (and a model without
the pull Secret refused), an autoscaler scaling it to two, a serving pod killed, a new
cache key rolled out while the old pod answers, a second model sharing the compile, a
failing compile and its fix, the operator killed during a compile, a model deleted, a hub
model downloaded once and served with the hub gone, a cache compiled ahead by a SpyreCache
and served by a later model, an unused key removed from the volume by a clean-up Job after
the retention, and the chart's `helm test`. Each asserts what a user sees: `kubectl get
sm`, status, Events, answers, pod logs.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from external_metrics import ExternalMetrics
from nodelib import EMPTY, Kubectl, SharedNode

from kstatuslib import Kstatus, reader
from spyre_devcluster import node_operator
from spyre_devcluster.hub import LocalHub
from spyre_devcluster.kubectl import KubectlError
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import NODE_IP
from spyre_devcluster.simulate import poll_until
from spyre_devcluster.tools import tool
from spyre_operator import __version__
from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.render.meta import selector_string
from spyre_runtime import contract

pytestmark = pytest.mark.node

WAIT = 1500  # a compile plus a serving start, on a loaded 2-core machine
FIRST = "story"
COMPILE = "app.kubernetes.io/component=compile"
OPERATOR = "app.kubernetes.io/name=spyre-operator"
# the steps `spyre-runtime precompile` logs (precompile.py, warmup.py), in order
STEPS = ("warmup", "config", "engine", "requests", "shutdown", "catalog", "ready", "publish")
HPA = "horizontalpodautoscalers.v2.autoscaling"
PULL_FAILED = (
    "ErrImagePull",
    "ImagePullBackOff",
)  # the kubelet's waiting reasons  # `hpa` reads v1: no conditions there
CACHE_CLAIM = "spyre-graph-cache"  # the cache volume's claim, made by the operator


@dataclass
class Cluster:
    node: Node
    kubectl: Kubectl
    namespace: str
    models: Path

    def get(self, *what: str) -> dict[str, Any]:
        return self.kubectl.get(*what)

    def kstatus(self, name: str = FIRST) -> tuple[str, str]:
        """(phase, kstatus) of a model as Flux's own library reads it (tests/kstatuslib.py)."""
        return Kstatus(reader(), self.node.kubeconfig)(KIND, self.namespace, name)

    def status(self, name: str = FIRST) -> dict[str, Any]:
        return self.get(f"spyremodel/{name}").get("status") or {}

    def apply(self, name: str, batching: dict[str, int] | None = None, **model: str) -> None:
        """The tiny model `name` (tiny_model's batching unless given; `model` over its
        spec.model)."""
        doc = node_operator.tiny_model(name)
        doc["spec"]["model"] |= model
        doc["spec"]["batching"]["continuous"] |= batching or {}
        self.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def batching(self, name: str = FIRST) -> dict[str, int]:
        """The model's continuous batching now (its cache key's limits)."""
        found: dict[str, int] = self.get(f"spyremodel/{name}")["spec"]["batching"]["continuous"]
        return found

    def serving(self, name: str = FIRST, replicas: int | None = None) -> dict[str, Any]:
        """The model Ready, with `replicas` if given; made with tiny_model's batching if
        missing (what a story needs, whichever ran before it); its status."""
        if not self.kubectl("get", "sm", name, "--ignore-not-found", "-o", "name").strip():
            self.apply(name)
        if replicas is not None:
            self.kubectl("scale", f"sm/{name}", f"--replicas={replicas}")
        return self.ready(name)

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.kubectl(
            "patch", f"spyremodel/{name}", "--type=merge", "-p", json.dumps({"spec": spec})
        )

    def rebatch(self, name: str, **limits: int) -> None:
        self.patch(name, {"batching": {"continuous": limits}})

    def wait(self, what: str, probe: Callable[[], Any], timeout: float = WAIT) -> Any:
        try:
            return poll_until(probe, what, timeout, interval=1.0)  # each probe runs kubectl
        except Exception:
            self.dump()
            raise

    def ready(self, name: str = FIRST, replicas: int | None = None) -> dict[str, Any]:
        """The model's status once Ready on its target key with `replicas` ready (default:
        as many as its spec asks for now, whatever the stories before left it at)."""
        if replicas is None:
            replicas = self.get(f"spyremodel/{name}")["spec"].get("replicas", 1)

        def probe() -> dict[str, Any] | None:
            s = self.status(name)
            done = s.get("phase") == "Ready" and s.get("readyReplicas") == replicas
            return s if done and s.get("activeCacheKey") == s.get("targetCacheKey") else None

        status: dict[str, Any] = self.wait(f"{name} Ready with {replicas} replicas", probe)
        return status

    def jobs(self) -> dict[str, str]:
        """Compile Jobs of the namespace: name -> uid."""
        items = self.get("jobs", "-l", COMPILE)["items"]
        return {j["metadata"]["name"]: j["metadata"]["uid"] for j in items}

    def pods(self, name: str = FIRST) -> list[dict[str, Any]]:
        selector = self.status(name)["selector"]
        items: list[dict[str, Any]] = self.get("pods", "-l", selector)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def answer(self, ip: str, port: int, timeout: float = 60) -> str:
        got = node_operator.complete(ip, port, "Hello", timeout)
        assert got["usage"]["completion_tokens"] >= 1, got
        text: str = got["choices"][0]["text"]
        return text

    def service(self, name: str = FIRST) -> tuple[str, int]:
        svc = self.get(f"service/{name}")["spec"]
        return svc["clusterIP"], svc["ports"][0]["port"]

    def events(self, name: str) -> list[tuple[str, str]]:
        """(type, reason) of the model's Events, oldest first."""
        selector = f"involvedObject.kind=SpyreModel,involvedObject.name={name}"
        items = self.get("events", "--field-selector", selector)["items"]
        items.sort(
            key=lambda e: (e.get("firstTimestamp") or "", int(e["metadata"]["resourceVersion"]))
        )
        return [(e["type"], e["reason"]) for e in items]

    def dump(self) -> None:
        print(self.kubectl("get", "spyremodel,job,pod,pvc", "-o", "wide"))
        print(self.kubectl("describe", "spyremodel,pod"))


def pod_address(pod: dict[str, Any]) -> tuple[str, int]:
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    return pod["status"]["podIP"], port


def phases(events: list[tuple[str, str]]) -> list[str]:
    """The phase Events, collapsed: [Compiling, Starting, Ready] for a first deploy."""
    kept = ("Downloading", "Compiling", "Starting", "Ready", "Failed", "Degraded")
    seen = [r for _, r in events if r in kept]
    return [r for i, r in enumerate(seen) if i == 0 or seen[i - 1] != r]


@contextmanager
def place(shared_node: SharedNode, models: Path, prefix: str) -> Iterator[Cluster]:
    """A namespace of its own (restricted, the pull Secret, the weights claim)."""
    node = shared_node.with_operator()
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kubectl = node_operator.make_namespace(node, namespace, models)
    try:
        yield Cluster(node, kubectl, namespace, models)
    finally:
        node_operator.delete_namespace(node, namespace)


@pytest.fixture(scope="module")
def cluster(shared_node: SharedNode, models: Path) -> Iterator[Cluster]:
    """The stories' shared namespace."""
    with place(shared_node, models, "stories") as shared:
        yield shared


@pytest.fixture
def fresh(cluster: Cluster, shared_node: SharedNode, models: Path) -> Iterator[Cluster]:
    """A namespace where nothing was compiled yet: the stories' own while it has no cache
    volume (no story before), else one of its own."""
    if not cluster.kubectl("get", "pvc", CACHE_CLAIM, "--ignore-not-found", "-o", "name"):
        yield cluster
        return
    with place(shared_node, models, "first") as own:
        yield own


@pytest.fixture
def scratch(cluster: Cluster) -> Iterator[list[str]]:
    """Names of the models (and SpyreCaches) a story makes for itself alone: deleted after
    it, passed or failed, so the 2-core node has room for the next."""
    made: list[str] = []
    yield made
    for kind in ("sm", "scache") if made else ():
        cluster.kubectl("delete", kind, *made, "--ignore-not-found", "--wait=false")


def test_first_deploy_compiles_then_serves(fresh: Cluster) -> None:
    cluster = fresh
    cluster.apply(FIRST)
    # While it compiles, status says how far, from the compile pod's real log (the chart
    # is installed with a 5 s progress interval: the tiny compile takes a minute or two).
    seen: list[dict[str, Any]] = []
    said: list[tuple[str, str]] = []  # (phase, kstatus) as Flux would read them
    cluster.wait("the compile, its progress in status", lambda: compiled(cluster, seen, said))
    cluster.wait(
        "past Starting", lambda: compiled(cluster, seen, said) and said[-1][0] != "Starting"
    )
    print("progress while compiling:", *seen, sep="\n  ")
    assert seen, "no progress while compiling"
    for progress in seen:
        assert progress["step"] in STEPS
        assert progress["pod"].startswith("spyre-compile-")
    assert [p["elapsedSeconds"] for p in seen] == sorted(p["elapsedSeconds"] for p in seen)
    status = cluster.ready()
    assert phases(cluster.events(FIRST)) == ["Compiling", "Starting", "Ready"]
    # InProgress while it compiled and started, Current once it serves, never before
    assert {k for phase, k in said if phase != "Ready"} == {"InProgress"}, said
    assert {phase for phase, _ in said} >= {"Compiling"}, said
    cluster.wait("kstatus Current", lambda: cluster.kstatus() == ("Ready", "Current"))
    # NAME PHASE CACHE READY FROM-CACHE REPLICAS ENDPOINT AGE: its one replica started from
    # the cache, as its compile report says (the operator reads it from the pod's log)
    cluster.wait("from the cache", lambda: cluster.status().get("replicasFromCache") == 1)
    row = cluster.kubectl("get", "sm", FIRST, "--no-headers").split()
    assert row[:2] == [FIRST, "Ready"] and row[3:6] == ["1", "1", "1"], row
    # the compile pod's own summary (its termination message), copied by the operator
    cache = status["cache"]
    assert cache["ok"] is True and cache["cacheKey"] == status["activeCacheKey"], cache
    assert cache["seconds"] > 0 and cache["versions"], cache
    # the compile pod really compiled (inductor's code generation, into the volume) ...
    assert any(c.compiled for c in compile_reports(cluster, f"job/{cache['jobName']}"))
    (pod,) = cluster.pods()
    name = pod["metadata"]["name"]
    uid = cluster.kubectl("exec", name, "--", "python3", "-c", "import os; print(os.getuid())")
    assert uid.strip() != "0"
    with pytest.raises(KubectlError, match="Read-only file system"):
        cluster.kubectl("exec", name, "--", "python3", "-c", "open('/probe', 'w')")
    # ... and the serving pod loaded what it wrote
    assert_started_from_cache(cluster, pod)
    assert cluster.answer(*cluster.service())
    # the bytes the compile pod reported are what is on the volume (READY, written after
    # the count, aside; the serving pods compiled nothing, so wrote nothing)
    assert cache["bytes"] == volume_bytes(cluster, name, cache["cacheKey"]), cache


def test_a_cache_emptied_by_hand_fails_the_serving_pod_fast_and_the_model_says_why(
    cluster: Cluster,
) -> None:
    """The key's compiled graphs (its inductor folder) moved out of the key's folder by hand,
    with the require switch on (a decoder's default): the next serving pod refuses at once,
    before vLLM is imported, and the model says why (Degraded CacheRejected with the pod's
    own message) in status and a Warning Event. The graphs put back, it starts from them."""
    key = cluster.serving(replicas=1)["activeCacheKey"]
    folder = volume_folder(cluster)
    graphs, aside = folder / key / contract.INDUCTOR_CACHE_SUBDIR, folder / f".aside-{key}"
    (victim,) = cluster.pods()
    graphs.rename(aside)  # on the node, as root; renamed back as they were
    try:
        cluster.kubectl("delete", "pod", victim["metadata"]["name"], "--wait=false")

        def said() -> dict[str, Any] | None:
            status = cluster.status()
            found = {c["type"]: c for c in status.get("conditions", [])}
            rejected = found.get("Degraded", {}).get("reason") == "CacheRejected"
            return status | {"found": found} if rejected else None

        status = cluster.wait("the model saying why its pod refused", said, timeout=300)
        (pod,) = cluster.pods()
        refused = refusal(pod)
        cluster.wait(
            "a Warning Event", lambda: ("Warning", "CacheRejected") in cluster.events(FIRST)
        )
    finally:
        aside.rename(graphs)
    found = status["found"]
    print(f"refused in {refused[1]:.1f} s: {found['Degraded']['message']}")
    assert refused[0] == 3, refused  # serve's exit code for CacheNotReady
    assert refused[1] < 15, refused  # no torch, no vLLM: the check alone
    message = found["Degraded"]["message"]
    assert message.startswith(f"serving pod {pod['metadata']['name']} refused the compiled")
    assert "inductor files its compile wrote" in message and "never compile" in message
    assert found["Degraded"]["status"] == "True" and found["Available"]["status"] == "False"
    assert status["phase"] == "Degraded", status
    # the graphs back where the compile put them: the kubelet's next restart starts from them
    cluster.ready()
    cluster.wait("from the cache", lambda: cluster.status().get("replicasFromCache") == 1)
    (pod,) = cluster.pods()
    assert_started_from_cache(cluster, pod)


def refusal(pod: dict[str, Any]) -> tuple[int, float]:
    """(exit code, seconds it ran) of the serving container's last termination, whose
    message is serve's CacheNotReady summary."""
    (status,) = pod["status"]["containerStatuses"]
    done = status["state"].get("terminated") or status["lastState"]["terminated"]
    ran = _instant(done["finishedAt"]) - _instant(done["startedAt"])
    summary = json.loads(done["message"].strip().splitlines()[-1])
    assert summary["reason"] == contract.CACHE_NOT_READY, summary
    return done["exitCode"], ran


def _instant(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def volume_folder(cluster: Cluster) -> Path:
    """The cache volume's folder on the node (the hostPath provisioner's)."""
    claim = cluster.get("pvc/spyre-graph-cache")["spec"]["volumeName"]
    return Path(cluster.get(f"pv/{claim}")["spec"]["hostPath"]["path"])


def test_the_images_come_from_the_registry_and_a_pod_without_its_secret_is_refused(
    cluster: Cluster,
) -> None:
    """The operator and the model were pulled from the node's registry (TLS, basic auth)
    with a docker-registry Secret: the chart's imagePullSecrets, the model's. A model
    without it, made to pull (Always), is refused in Kubernetes' own words."""
    cluster.serving(replicas=1)
    node, registry = cluster.node, cluster.node.registry
    system = Kubectl(node.kubeconfig, node_operator.NAMESPACE)
    (operator,) = system.get("pods", "-l", OPERATOR)["items"]
    operator_image = registry.reference(node_operator.OPERATOR_IMAGE, __version__)
    assert operator["spec"]["containers"][0]["image"] == operator_image
    assert operator["spec"]["imagePullSecrets"] == [{"name": node_operator.PULL_SECRET}]
    (pod,) = cluster.pods()
    assert pod["spec"]["containers"][0]["image"] == node_operator.serving_image(node)
    assert pod["spec"]["imagePullSecrets"] == [{"name": node_operator.PULL_SECRET}]
    # pulled, not imported: containerd has them under the registry's names
    pulled = node.ctr().images()
    assert {operator_image, node_operator.serving_image(node)} <= pulled.keys()

    doc = node_operator.tiny_model("no-secret")
    del doc["spec"]["imagePullSecrets"]
    doc["spec"]["imagePullPolicy"] = "Always"
    doc["spec"]["batching"]["continuous"] = cluster.batching()  # FIRST's key: compiled
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def refused() -> tuple[str, str] | None:
        for pod in cluster.get("pods", "-l", selector_string("no-secret"))["items"]:
            state = pod["status"].get("containerStatuses", [{}])[0].get("state", {})
            reason = state.get("waiting", {}).get("reason", "")
            name = pod["metadata"]["name"]
            events = cluster.get("events", "--field-selector", f"involvedObject.name={name}")
            failed = [e["message"] for e in events["items"] if e["reason"] == "Failed"]
            if reason in PULL_FAILED and failed:
                return reason, failed[0]
        return None

    reason, message = cluster.wait("the pull refused", refused, timeout=300)
    print(f"no-secret: {reason}: {message}")
    # containerd 2's words for the registry's 401 (1.6 quoted the status line itself)
    assert "no basic auth credentials" in message and registry.address in message, message

    def shown() -> dict[str, Any] | None:  # the serving pod's image, in the model's status
        conditions = cluster.status("no-secret").get("conditions", [])
        found = [c for c in conditions if c["type"] == "Available"]
        return found[0] if found and found[0]["reason"] == contract.IMAGE_UNUSABLE else None

    available = cluster.wait("the pull failure in status", shown, timeout=120)
    assert available["status"] == "False", available
    image = node_operator.serving_image(node)
    assert f": image {image} cannot be pulled (" in available["message"], available
    assert "spec.imagePullSecrets" in available["message"], available
    cluster.kubectl("delete", "spyremodel/no-secret")


def compiled(cluster: Cluster, seen: list[dict[str, Any]], said: list[tuple[str, str]]) -> bool:
    """Whether the first model is past Compiling; each new status.cache.progress on the way
    (also in the CacheReady message) is added to `seen`, each new (phase, kstatus) to
    `said`."""
    obj = cluster.get(f"spyremodel/{FIRST}")
    status = obj.get("status") or {}
    now = cluster.kstatus()
    if now[0] and (not said or said[-1] != now):
        said.append(now)
    progress = (status.get("cache") or {}).get("progress")
    if progress and progress not in seen:
        message = next(c for c in status["conditions"] if c["type"] == "CacheReady")["message"]
        assert f"step {progress['step']} at " in message, message
        seen.append(progress)
    return status.get("phase") not in (None, "Compiling")


def volume_bytes(cluster: Cluster, pod: str, key: str) -> int:
    """Bytes of the regular files under the key's directory but READY, read in a pod."""
    script = (
        "import os, stat, sys; t = 0\n"
        "for top, _, names in os.walk(sys.argv[1]):\n"
        "    for n in names:\n"
        "        st = os.lstat(os.path.join(top, n))\n"
        "        t += st.st_size if stat.S_ISREG(st.st_mode) and n != 'READY' else 0\n"
        "print(t)"
    )
    out = cluster.kubectl("exec", pod, "--", "python3", "-c", script, f"/var/cache/spyre/{key}")
    return int(out.strip())


def test_an_autoscaler_scales_to_two_and_the_second_replica_starts_from_the_cache(
    cluster: Cluster,
) -> None:
    """The controller manager's HPA on a metric the test serves (the external metrics API,
    KEDA's contract) reads the SpyreModel's scale subresource and takes it from 1 to 2
    replicas; the second replica loads the compiled graphs and compiles nothing."""
    cluster.serving(replicas=1)
    jobs = cluster.jobs()
    (first,) = cluster.pods()
    metric = "spyre_waiting_requests"
    with ExternalMetrics() as metrics:
        metrics.set(metric, "0")
        try:
            metrics.register(cluster.kubectl, cluster.namespace)
            cluster.kubectl("apply", "-f", "-", input=json.dumps(autoscaler(FIRST, metric)))
            cluster.wait("the HPA reading the model's scale and the metric", lambda: (
                conditions(cluster.get(f"{HPA}/{FIRST}"))
                >= {("AbleToScale", "True"), ("ScalingActive", "True")}
            ))  # fmt: skip
            assert cluster.status()["replicas"] == 1  # a value of 0: the minimum, 1
            metrics.set(metric, "2")  # two waiting requests, one per replica wanted
            cluster.ready(replicas=2)
            hpa = cluster.get(f"{HPA}/{FIRST}")
            assert hpa["status"]["desiredReplicas"] == 2, hpa["status"]
            assert cluster.get(f"spyremodel/{FIRST}")["spec"]["replicas"] == 2
            assert metrics.reads[metric] >= 2
        finally:
            cluster.kubectl("delete", "hpa", FIRST, "--ignore-not-found")
            ExternalMetrics.unregister(cluster.kubectl)
    pods = cluster.pods()
    (second,) = [p for p in pods if p["metadata"]["name"] != first["metadata"]["name"]]
    assert_started_from_cache(cluster, second)
    for pod in pods:
        assert cluster.answer(*pod_address(pod))
    assert cluster.jobs() == jobs


def autoscaler(name: str, metric: str) -> dict[str, Any]:
    """An HPA (autoscaling/v2, served since Kubernetes 1.23) on the SpyreModel: one replica per
    unit of the external metric, between 1 and 2."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "SpyreModel", "name": name},
            "minReplicas": 1,
            "maxReplicas": 2,
            "metrics": [{"type": "External", "external": {
                "metric": {"name": metric},
                "target": {"type": "AverageValue", "averageValue": "1"},
            }}],
        },
    }  # fmt: skip


def conditions(obj: dict[str, Any]) -> set[tuple[str, str]]:
    return {(c["type"], c["status"]) for c in obj.get("status", {}).get("conditions") or []}


def test_a_killed_serving_pod_comes_back_from_the_cache(cluster: Cluster) -> None:
    cluster.serving()
    jobs = cluster.jobs()
    before = {p["metadata"]["name"] for p in cluster.pods()}
    cluster.kubectl("delete", "pod", min(before), "--wait=false")
    (name,) = cluster.wait(
        "a new pod in place of the deleted one",
        lambda: {p["metadata"]["name"] for p in cluster.pods()} - before,
    )

    def newcomer_ready() -> dict[str, Any] | None:
        pod: dict[str, Any] = cluster.get(f"pod/{name}")
        statuses = pod["status"].get("containerStatuses") or []
        return pod if statuses and all(c["ready"] for c in statuses) else None

    newcomer = cluster.wait(f"{name} Ready", newcomer_ready)
    cluster.ready()
    assert_started_from_cache(cluster, newcomer)
    assert cluster.answer(*pod_address(newcomer))
    assert cluster.jobs() == jobs


class Poller:
    """Completions through a Service, one after another, from a thread; counts failures."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.answered = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                node_operator.complete(*self.address, "Hi", timeout=0)
                self.answered += 1
            except OSError as err:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {err}")
            self.stop.wait(0.2)

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(120)


def test_a_new_cache_key_rolls_out_while_the_old_pod_answers(cluster: Cluster) -> None:
    old = cluster.serving(replicas=1)["activeCacheKey"]
    with Poller(cluster.service()) as poller:
        cluster.rebatch(FIRST, maxNumBatchedTokens=64)  # the prefill chunk: a new cache key
        compiling = cluster.wait(
            "the new key compiling",
            lambda: (s := cluster.status())["targetCacheKey"] != old and s,
        )
        assert compiling["activeCacheKey"] == old
        status = cluster.ready()
        cluster.wait("the old pod gone", lambda: all(serves_key(p, status) for p in cluster.pods()))
        answered_during = poller.answered
    assert status["activeCacheKey"] not in (None, old)
    assert poller.failures == [], poller.failures
    assert answered_during >= 10, answered_during


def serves_key(pod: dict[str, Any], status: dict[str, Any]) -> bool:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    return env.get("SPYRE_SERVING_CACHE_KEY") == status["activeCacheKey"]


def test_two_models_with_the_same_compile_config_share_one_compile(cluster: Cluster) -> None:
    cluster.serving()
    cluster.kubectl("delete", "sm", "twin", "--ignore-not-found")  # made here, not before
    jobs = cluster.jobs()
    cluster.apply("twin", cluster.batching())
    twin = cluster.ready("twin")
    assert twin["activeCacheKey"] == cluster.status()["activeCacheKey"]
    assert cluster.jobs() == jobs
    job = cluster.get(f"job/{twin['cache']['jobName']}")
    entry = "spyre-cache-" + job["metadata"]["labels"]["serving.spyre.dev/cache-key"]
    owners = {(o["kind"], o["name"]) for o in job["metadata"]["ownerReferences"]}
    assert owners == {("SpyreModel", FIRST), ("SpyreModel", "twin"), ("SpyreCache", entry)}
    assert cluster.answer(*cluster.service("twin"))


def test_a_failing_compile_shows_the_runtimes_reason_and_a_fix_recovers(
    cluster: Cluster, scratch: list[str]
) -> None:
    cluster.serving()
    scratch.append("broken")
    cluster.apply("broken", cluster.batching(), path=f"/models/{EMPTY}")  # no model there
    status = cluster.wait(
        "broken Failed", lambda: (s := cluster.status("broken")).get("phase") == "Failed" and s
    )
    cache = status["cache"]
    assert cache["ok"] is False and cache["reason"] == "ModelNotFound", cache
    degraded = {c["type"]: c for c in status["conditions"]}["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == "ModelNotFound", degraded
    assert ("Warning", "ModelNotFound") in cluster.events("broken")
    jobs = cluster.jobs()
    cluster.patch("broken", {"model": {"path": "/models/granite"}})  # the fix: the same key
    fixed = cluster.ready("broken")
    assert fixed["activeCacheKey"] == cluster.status()["activeCacheKey"]
    assert cluster.jobs() == jobs  # the key's cache is there: nothing compiled
    assert cluster.answer(*cluster.service("broken"))


def test_the_operator_killed_during_a_compile_resumes_the_same_job(cluster: Cluster) -> None:
    cluster.serving()
    before = cluster.jobs()
    cluster.rebatch(FIRST, maxModelLen=192)
    (job,) = cluster.wait("a new compile Job", lambda: set(cluster.jobs()) - set(before))
    uid = cluster.jobs()[job]
    cluster.wait(
        "the compile pod running",
        lambda: any(
            p["status"]["phase"] == "Running"
            for p in cluster.get("pods", "-l", f"job-name={job}")["items"]
        ),
    )
    system = Kubectl(cluster.node.kubeconfig, node_operator.NAMESPACE)
    (operator,) = system.get("pods", "-l", OPERATOR)["items"]
    system("delete", "pod", operator["metadata"]["name"], "--wait=false")
    status = cluster.ready()
    assert cluster.jobs()[job] == uid
    compile_pods = cluster.get("pods", "-l", f"job-name={job}")["items"]
    assert len(compile_pods) == 1, [p["metadata"]["name"] for p in compile_pods]
    assert status["cache"]["jobName"] == job and status["cache"]["ok"] is True
    # and the killed pod really went (it is listed until it has stopped)
    killed = operator["metadata"]["name"]
    cluster.wait(
        f"{killed} gone",
        lambda: (
            killed
            not in {p["metadata"]["name"] for p in system.get("pods", "-l", OPERATOR)["items"]}
        ),
    )


def test_deleting_a_model_removes_its_children_and_keeps_the_cache(cluster: Cluster) -> None:
    cluster.serving("twin")
    key = cluster.serving()["activeCacheKey"]
    pvc = cluster.get(f"pvc/{CACHE_CLAIM}")
    volume = cluster.get(f"pv/{pvc['spec']['volumeName']}")["spec"]["hostPath"]["path"]
    cluster.kubectl("delete", "sm", FIRST)

    def gone(kind: str) -> bool:
        return not cluster.kubectl("get", kind, FIRST, "--ignore-not-found", "-o", "name").strip()

    cluster.wait(
        "the garbage collector removing the children", lambda: gone("deploy") and gone("svc")
    )
    after = cluster.get(f"pvc/{CACHE_CLAIM}")
    assert after["metadata"]["uid"] == pvc["metadata"]["uid"]
    assert after["status"]["phase"] == "Bound"
    assert (Path(volume) / key / "READY").exists()
    assert cluster.answer(*cluster.service("twin"))  # the other models keep serving


def test_a_hub_model_is_downloaded_once_and_served_without_the_hub(
    cluster: Cluster, scratch: list[str]
) -> None:
    """The tiny Granite from a hub the test runs on the host (the real huggingface_hub
    client in the weights pod, HF_ENDPOINT pointing at it): one download, then the hub is
    stopped and a second replica starts from the volume alone."""
    name, hub_id = "hub", "spyre-tests/tiny-granite"
    scratch.append(name)
    with LocalHub(host="0.0.0.0") as hub:
        commit = hub.add_repo(hub_id, cluster.models / "granite")
        doc = node_operator.tiny_model(name)
        doc["spec"]["model"] = {
            "id": hub_id,
            "servedName": node_operator.MODEL_NAME,  # what the completion requests name
            "source": {"hub": {"endpoint": f"http://{NODE_IP}:{hub.port}"}},
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
        status = cluster.ready(name)
        downloads = hub.file_downloads(hub_id)
    weights = status["weights"]
    assert (weights["state"], weights["commit"], weights["downloaded"]) == ("Ready", commit, True)
    assert downloads and set(downloads.values()) == {1}, downloads  # every file, once
    assert phases(cluster.events(name)) == ["Downloading", "Compiling", "Starting", "Ready"]
    row = cluster.kubectl("get", "sm", name, "-o", "wide", "--no-headers").split()
    assert "Ready" in row and commit in row, row  # the Weights and Commit columns
    (pod,) = cluster.pods(name)
    model_dir = f"/models/{hub_id}"
    with pytest.raises(KubectlError, match="Read-only file system"):
        cluster.kubectl(
            "exec", pod["metadata"]["name"], "--", "python3", "-c", f"open('{model_dir}/x', 'w')"
        )

    # The hub is gone: a second replica needs nothing from it.
    cluster.kubectl("scale", f"sm/{name}", "--replicas=2")
    cluster.ready(name, replicas=2)
    for serving in cluster.pods(name):
        assert cluster.answer(*pod_address(serving))
    weights_jobs = cluster.get("jobs", "-l", "app.kubernetes.io/component=weights")["items"]
    assert [j["metadata"]["name"] for j in weights_jobs] == [weights["jobName"]]
    weights_pods = cluster.get("pods", "-l", f"job-name={weights['jobName']}")["items"]
    assert len(weights_pods) == 1


def test_a_cache_compiled_ahead_serves_a_later_model_without_a_compile(
    cluster: Cluster, scratch: list[str]
) -> None:
    """A SpyreCache compiles a configuration with no SpyreModel; the SpyreModel that comes
    later with that spec starts from the cache: no Job, nothing compiled in its pod."""
    scratch.append("ahead")
    doc = node_operator.tiny_model("ahead")
    doc["spec"]["batching"]["continuous"]["maxNumSeqs"] = 1  # a key of its own
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc | {"kind": "SpyreCache"}))

    def compiled() -> dict[str, Any] | None:
        status: dict[str, Any] = cluster.get("spyrecache/ahead").get("status") or {}
        return status if status.get("phase") == "Ready" else None

    cache = cluster.wait("the SpyreCache compiled", compiled)
    assert cache["cache"]["ok"] is True and cache["cache"]["bytes"] > 0, cache
    row = cluster.kubectl("get", "scache", "ahead", "--no-headers").split()
    assert row[:3] == ["ahead", "Ready", "Compiled"], row  # NAME PHASE CACHE MODEL ...
    assert not cluster.kubectl("get", "deploy", "ahead", "--ignore-not-found", "-o", "name")
    job = cache["cache"]["jobName"]
    assert any(c.compiled for c in compile_reports(cluster, f"job/{job}"))

    jobs = cluster.jobs()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    status = cluster.ready("ahead")
    assert status["activeCacheKey"] == cache["targetCacheKey"]
    assert cluster.jobs() == jobs  # joined the finished Job: no compile of its own
    (pod,) = cluster.pods("ahead")
    assert_started_from_cache(cluster, pod)
    assert cluster.answer(*cluster.service("ahead"))
    bytes_on_disk = volume_bytes(cluster, pod["metadata"]["name"], cache["targetCacheKey"])
    assert cache["cache"]["bytes"] == bytes_on_disk, cache


def test_an_unused_key_is_removed_from_the_volume_by_a_real_clean_up_job(
    cluster: Cluster,
) -> None:
    """The key's inventory entry says the bytes on the volume; with the chart's retention
    set short, the model deleted, a real clean-up Job removes the key's directory and
    nothing else, and the entry goes."""
    cluster.apply("sweep", {"maxNumSeqs": 3})  # a key of its own
    status = cluster.ready("sweep")
    key = status["targetCacheKey"]
    entry = f"spyrecache/spyre-cache-{key[:12]}"

    def listed() -> dict[str, Any] | None:
        found: dict[str, Any] = cluster.get(entry).get("status") or {}
        return found if found.get("usedBy") == ["sweep"] else None

    listed_status = cluster.wait("the key's entry lists sweep", listed)
    (pod,) = cluster.pods("sweep")
    on_disk = volume_bytes(cluster, pod["metadata"]["name"], key)
    assert listed_status["cache"]["bytes"] == on_disk > 0, listed_status
    folder = volume_folder(cluster)
    files = [f for f in (folder / key).rglob("*") if f.is_file() and not f.is_symlink()]
    # du --apparent-size of its files, read on the host (READY is written after the count)
    assert sum(f.stat().st_size for f in files if f.name != "READY") == on_disk
    weights = (folder / "weights").is_dir()  # the hub story's download, if it ran
    stranger = folder / ("0" * 64)  # a key directory no entry lists: never touched
    stranger.mkdir()
    (stranger / "graph.bin").write_bytes(b"x" * 100)

    node_operator.install_chart(cluster.node, {"operator.cacheRetention": "20s"})
    try:
        cluster.kubectl("delete", "sm", "sweep")
        cleanup = f"job/spyre-cleanup-{key[:12]}"

        def cleaned() -> bool:
            found = cluster.kubectl("get", entry, "--ignore-not-found", "-o", "name")
            return not found and not (folder / key).exists()

        cluster.wait("the clean-up Job removed the key and its entry went", cleaned)
        cluster.wait(
            "the garbage collector took the clean-up Job",
            lambda: not cluster.kubectl("get", cleanup, "--ignore-not-found", "-o", "name"),
        )
        # the keys still served, the weights and the other key stay (the unused keys of
        # earlier stories may go: their entries clean them up too)
        used = {m["status"].get("activeCacheKey") for m in cluster.get("sm")["items"]}
        assert all((folder / k).is_dir() for k in used if k), used
        assert (folder / "weights").is_dir() == weights
        assert (stranger / "graph.bin").read_bytes() == b"x" * 100
    finally:
        if stranger.exists():
            (stranger / "graph.bin").unlink()
            stranger.rmdir()
        node_operator.install_chart(cluster.node)  # the default retention again


def test_helm_test_passes_on_the_installed_chart(cluster: Cluster) -> None:
    """The chart's test pod (the operator's image) on the real node."""
    done = subprocess.run(
        [tool("helm"), "--kubeconfig", str(cluster.node.kubeconfig), "test",
         node_operator.RELEASE, "-n", node_operator.NAMESPACE, "--logs", "--timeout", "5m"],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: the API server serves spyremodels" in done.stdout, done.stdout


def compile_reports(cluster: Cluster, *what: str) -> list[contract.CompileCounts]:
    """The compile-cache report lines (spyre_runtime.contract) in a pod's output."""
    logs = cluster.kubectl("logs", *what)
    reports = list(contract.parse(logs).values())
    assert reports, f"no {contract.MARKER} line in the logs of {what}:\n{logs[-3000:]}"
    return reports


def assert_started_from_cache(cluster: Cluster, pod: dict[str, Any]) -> None:
    """The serving pod's own output says it loaded its graphs and compiled nothing."""
    for counts in compile_reports(cluster, pod["metadata"]["name"]):
        assert counts.from_cache and not counts.compiled, counts
