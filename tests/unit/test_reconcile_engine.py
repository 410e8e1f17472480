"""The reconcile loop against an in-memory API (idempotence, stale copies, refusals)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from apilib import example

from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.validation import validate
from spyre_operator.controller.echoes import Echoes, unstored
from spyre_operator.controller.failures import complain
from spyre_operator.controller.kinds import Controller
from spyre_operator.controller.workqueue import WorkQueue
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile import engine, shared
from spyre_operator.reconcile.apply import execute
from spyre_operator.reconcile.compile_queue import Limits, Queue, Want, wanted
from spyre_operator.reconcile.conditions import Event, find
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.shared import Shared
from spyre_operator.render import cachekey, meta
from spyre_operator.settings import Settings

pytestmark = pytest.mark.unit


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube(Kube):
    """Just enough of the API server: versions, generations, 409s, label selectors."""

    def __init__(self) -> None:
        super().__init__(api=None)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.version = 0
        self.refuse: set[str] = set()  # kinds whose writes answer with `refusal`
        self.refusal = ApiError(422, "Invalid", {"message": "spec.template: Invalid value"})
        self.refuse_dry_run: set[str] = set()  # kinds whose dry runs answer with `refusal`
        self.logs: dict[str, str] = {}  # pod name -> its log

    def log_tail(
        self, namespace: str, pod: str, container: str, lines: int, limit: int, timeout: float
    ) -> str:
        if pod not in self.logs:
            raise ApiError(400, "BadRequest", {"message": f"pod {pod} has no log"})
        return self.logs[pod]

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def list(
        self, kind: str, namespace: str, selector: str, consistent: bool = False
    ) -> list[dict[str, Any]]:
        wanted = dict(part.split("=") for part in selector.split(","))
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in self.objects.items()
            if k == kind
            and ns == namespace
            and wanted.items() <= (o["metadata"].get("labels") or {}).items()
        ]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._count("POST", obj["kind"])
        meta = obj["metadata"]
        if obj["kind"] in self.refuse:
            raise self.refusal
        if (obj["kind"], meta["namespace"], meta["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists")
        obj = copy.deepcopy(obj)
        obj["metadata"] |= {"uid": f"uid-{meta['name']}", "generation": 1}
        return self._store(obj)

    def delete(self, kind: str, namespace: str, name: str, resource_version: str = "") -> None:
        self._count("DELETE", kind)
        self.objects.pop((kind, namespace, name), None)

    def collect_garbage(self) -> None:
        """The garbage collector: owner references to deleted objects go, and objects
        whose owners all went."""
        uids = {o["metadata"].get("uid") for o in self.objects.values()}
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            kept = [r for r in refs if r["uid"] in uids]
            if refs and not kept:
                del self.objects[key]
            elif kept != refs:
                obj["metadata"]["ownerReferences"] = kept
                self._store(obj)

    def dry_run(self, obj: dict[str, Any]) -> None:
        self.dry_runs[obj["kind"]] += 1
        meta = obj["metadata"]
        if obj["kind"] in self.refuse_dry_run:
            raise self.refusal
        if (obj["kind"], meta["namespace"], meta["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists")

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._count("APPLY", obj["kind"])
        if obj["kind"] in self.refuse:
            raise self.refusal
        meta = obj["metadata"]
        live = self.get(obj["kind"], meta["namespace"], meta["name"])
        if live is None:
            return self.create(obj)
        changed = live["spec"] != obj["spec"]
        live["spec"] = copy.deepcopy(obj["spec"])
        live["metadata"] |= {k: v for k, v in meta.items() if k != "namespace"}
        live["metadata"]["generation"] += int(changed)
        return self._store(live)

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        content_type: str = "",
        sub: str | None = None,
    ) -> dict[str, Any]:
        self._count("PATCH", kind)
        live = self.get(kind, namespace, name)
        if live is None:
            raise ApiError(404, "NotFound")
        expected = body.get("metadata", {}).get("resourceVersion")
        if expected is not None and expected != live["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        if "ownerReferences" in body.get("metadata", {}):
            refs = live["metadata"].setdefault("ownerReferences", [])
            refs += [r for r in body["metadata"]["ownerReferences"] if r not in refs]
        if "annotations" in body.get("metadata", {}):
            live["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
        for part in ("status", "spec"):
            if part in body:
                live.setdefault(part, {})
                merge_patch(live[part], body[part])
        return self._store(live)


NS = "default"


@pytest.fixture
def kube() -> FakeKube:
    fake = FakeKube()
    model = example("micro-granite-cpu")
    model["metadata"] |= {"uid": "uid-m", "generation": 1, "namespace": NS}
    fake._store(model)
    return fake


class Sink:
    """Events as the API server keeps them: a name posted again is AlreadyExists."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.names: list[str | None] = []  # of every post, repeats included

    def __call__(self, body: dict[str, Any], event: Event, name: str | None = None) -> None:
        if name is None or name not in self.names:
            self.events.append(event)
        self.names.append(name)


def reconciler(kube: FakeKube) -> tuple[Controller, list[Event]]:
    sink = Sink()
    return controlled(kube, sink), sink.events


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def controlled(
    kube: FakeKube,
    emit: engine.EventSink,
    stored: Callable[[str, str], dict[str, Any] | None] = unstored,
) -> Controller:
    """A SpyreModel's reconciler in a controller as the operator's (its echoes, a work
    queue without worker threads, with a clock the test moves)."""
    ctl: Controller
    queue = WorkQueue(lambda key: ctl.reconcile(key[1], key[2]), complain, clock=Clock())
    echoes = Echoes(stored)
    shared = Shared(busy=lambda: not queue.idle(), clock=lambda: "T")
    ctl = Controller(Reconciler(kube, emit, store=echoes, shared=shared), queue, echoes)
    return ctl


def run(ctl: Controller, name: str = "micro-granite-cpu") -> None:
    """A trigger: queue the model and run what is queued (never raises)."""
    ctl.enqueue(NS, name)
    while ctl.queue.process(block=False):
        pass


def retry(ctl: Controller, name: str = "micro-granite-cpu") -> None:
    """Let the pending retry's time come and run it."""
    delay = ctl.queue.retry_in((ctl.kind, NS, name))
    assert delay is not None and isinstance(ctl.queue.clock, Clock)
    ctl.queue.clock.now += delay
    assert ctl.queue.process(block=False)


def pending(ctl: Controller, name: str = "micro-granite-cpu") -> tuple[int, float | None]:
    """(failures in a row, seconds until the retry)"""
    key = (ctl.kind, NS, name)
    return ctl.queue.failures(key), ctl.queue.retry_in(key)


def errors(ctl: Controller) -> int:
    """Runs that failed."""
    return sum(ctl.queue.loop_stats().errors.values())


COMMIT = "6e9c6465a9d7e5e9fa35004a29f0c90befa7d23f"  # the example's pinned revision


def finish(kube: FakeKube, component: str, summary: dict[str, Any]) -> None:
    """The newest Job of a component (weights, compile) succeeded; its pod said `summary`."""
    jobs = [o for (k, _, n), o in kube.objects.items() if k == "Job" and f"-{component}-" in n]
    job = jobs[-1]
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    name = job["metadata"]["name"]
    container = job["spec"]["template"]["spec"]["containers"][0]["name"]
    terminated = {"reason": "Completed", "exitCode": 0, "message": json.dumps(summary)}
    kube._store(
        {
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-0",
                "namespace": NS,
                "creationTimestamp": "T",
                "labels": {"job-name": name},
            },
            "status": {
                "containerStatuses": [{"name": container, "state": {"terminated": terminated}}]
            },
        }
    )


def finish_weights(kube: FakeKube) -> None:
    finish(kube, "weights", {"ok": True, "commit": COMMIT, "bytes": 2048, "downloaded": True})


def finish_compile(kube: FakeKube, rec: Reconciler | Controller) -> None:
    """From a new model: its weights downloaded, then its compile done."""
    rec.reconcile(NS, "micro-granite-cpu")
    finish_weights(kube)
    rec.reconcile(NS, "micro-granite-cpu")
    finish(kube, "compile", {"ok": True, "seconds": 9})


def index_agrees(kube: FakeKube) -> list[Want]:
    """What kopf's index reads of each SpyreModel's and SpyreCache's status (the key a
    reconcile decided from its spec) is what it computes from a spec no status was
    decided from; the compile Jobs they want."""
    found = []
    for (kind, _, _), body in kube.objects.items():
        if kind in ("SpyreModel", CACHE_KIND):
            undecided = copy.deepcopy(body)
            (undecided.get("status") or {}).pop("observedGeneration", None)
            want = wanted(body)
            assert want == wanted(undecided)
            found += [want] if want else []
    return found


def test_first_pass_creates_then_idle_passes_write_nothing(kube: FakeKube) -> None:
    rec, events = reconciler(kube)
    rec.reconcile(NS, "micro-granite-cpu")
    assert index_agrees(kube) == []  # the weights first
    assert dict(kube.writes) == {
        "POST PersistentVolumeClaim": 1,
        "POST Job": 1,
        "PATCH SpyreModel": 1,
    }
    # One Event for the pass: its transition, naming what it wrote.
    ((_, reason, message),) = [(e.type, e.reason, e.message) for e in events]
    assert reason == "Downloading"
    assert "created PersistentVolumeClaim" in message and "in Job spyre-weights-" in message
    writes, count = kube.total_writes(), len(events)
    for _ in range(3):
        rec.reconcile(NS, "micro-granite-cpu")
    assert (kube.total_writes(), len(events)) == (writes, count)

    finish_weights(kube)
    rec.reconcile(NS, "micro-granite-cpu")
    assert kube.writes["POST Job"] == 2
    (_, reason, message) = (events[-1].type, events[-1].reason, events[-1].message)
    assert reason == "Compiling" and "in Job spyre-compile-" in message
    assert kube.writes["POST SpyreCache"] == 0  # its inventory entry: once the Job is seen
    rec.reconcile(NS, "micro-granite-cpu")
    assert kube.writes["POST SpyreCache"] == 1 and events[-1].reason == "CreatedCacheEntry"
    (want,) = index_agrees(kube)  # the entry has no status yet
    assert want.job.startswith("spyre-compile-")
    writes, count = kube.total_writes(), len(events)
    rec.reconcile(NS, "micro-granite-cpu")  # the entry has not joined the Job: not made again
    assert (kube.total_writes(), len(events)) == (writes, count)

    finish(kube, "compile", {"ok": True, "seconds": 9})
    rec.reconcile(NS, "micro-granite-cpu")
    assert index_agrees(kube) == []  # compiled
    assert kube.writes["APPLY Deployment"] == kube.writes["APPLY Service"] == 1
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    assert (status["phase"], status["cache"]["seconds"]) == ("Starting", 9)
    writes = kube.total_writes()
    rec.reconcile(NS, "micro-granite-cpu")
    assert kube.total_writes() == writes


def test_deployment_writes_are_applies_but_the_replicas_follow_by_patch(kube: FakeKube) -> None:
    """Create and update alike are one server-side apply of the whole manifest (so a field
    removed from the spec leaves); only following spec.replicas while a new cache compiles
    is a patch of that one field."""
    name = "micro-granite-cpu"
    rec, _ = reconciler(kube)
    finish_compile(kube, rec)
    rec.reconcile(NS, name)

    def pod_spec() -> dict[str, Any]:
        deploy = kube.get("Deployment", NS, name)
        assert deploy is not None
        spec: dict[str, Any] = deploy["spec"]["template"]["spec"]
        return spec

    kube.patch("SpyreModel", NS, name, {"spec": {"nodeSelector": {"zone": "a"}}})
    rec.reconcile(NS, name)
    assert pod_spec()["nodeSelector"] == {"zone": "a"}
    kube.patch("SpyreModel", NS, name, {"spec": {"nodeSelector": None}})
    rec.reconcile(NS, name)
    assert "nodeSelector" not in pod_spec()
    assert kube.writes["APPLY Deployment"] == 3 and "PATCH Deployment" not in kube.writes

    new_key = {"batching": {"continuous": {"maxNumSeqs": 2}}, "replicas": 3}
    kube.patch("SpyreModel", NS, name, {"spec": new_key})
    rec.reconcile(NS, name)  # compiles the new key; the old Deployment follows replicas
    assert kube.writes["PATCH Deployment"] == 1 and kube.writes["APPLY Deployment"] == 3
    assert kube.get("Deployment", NS, name)["spec"]["replicas"] == 3  # type: ignore[index]


def keys_computed(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The configurations cache_key hashes from now on (each computation of a key)."""
    computed: list[dict[str, Any]] = []
    hashed = cachekey.canonical_json

    def counted(config: dict[str, Any]) -> str:
        computed.append(config)
        return hashed(config)

    monkeypatch.setattr(cachekey, "canonical_json", counted)
    return computed


def test_the_cache_key_is_computed_once_per_reconcile(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """observe computes it (a hub model's once its commit is known: before, the manifests
    from the pinned revision); decide, the manifests it compares, the dry run of a pass
    that starts a Job (a hub model's key stands in) and the plan again under the compile
    lock carry it."""
    local = example("micro-granite-cpu")
    local["spec"]["model"] = ON_A_PVC
    local["metadata"] = {"name": "local", "namespace": NS, "uid": "uid-l", "generation": 1}
    kube._store(local)
    free = Queue(Limits(cluster=2), frozenset(), ())
    rec = Reconciler(kube, Sink(), shared=Shared(compile_queue=lambda: free, clock=lambda: "T"))
    computed = keys_computed(monkeypatch)

    def computed_by(name: str) -> int:
        computed.clear()
        rec.reconcile(NS, name)
        return len(computed)

    assert computed_by("local") == 1  # starts its compile Job: dry runs, the lock
    assert computed_by("micro-granite-cpu") == 1  # the weights Job (its dry runs)
    finish_weights(kube)
    assert computed_by("micro-granite-cpu") == 1  # its compile Job: dry runs, the lock
    finish(kube, "compile", {"ok": True, "seconds": 9})
    for _ in range(3):  # the Deployment created, then passes with nothing to write
        assert computed_by("micro-granite-cpu") == 1
    assert kube.writes["POST Job"] == 3 and kube.writes["APPLY Deployment"] == 1
    assert kube.dry_runs["Deployment"] == 2  # one per spec: the local one's and the hub's


def test_a_stale_copy_is_read_again_and_written_once(kube: FakeKube) -> None:
    sink = Sink()
    stale = kube.get("SpyreModel", NS, "micro-granite-cpu")
    assert stale is not None
    kube.patch("SpyreModel", NS, "micro-granite-cpu", {"metadata": {}, "spec": {"replicas": 2}})
    rec = controlled(kube, sink, lambda namespace, name: stale)  # the store lacks the change
    rec.reconcile(NS, "micro-granite-cpu")
    assert rec.reconciler.stats["conflicts"] == 1
    events = sink.events
    # The spec change above, the refused status write (409), then the one that counts.
    assert kube.writes["PATCH SpyreModel"] == 3
    assert [e.reason for e in events].count("Downloading") == 1


def test_a_transition_is_said_before_its_status_and_again_under_its_name_after_a_crash(
    kube: FakeKube,
) -> None:
    """The operator killed between the Event and the status write: the next one decides
    the same transition from the same stored status and posts it under the same name."""
    sink = Sink()
    order: list[str] = []
    real_patch = kube.patch

    def crash_on_status(kind: str, namespace: str, name: str, patch: Any, **kw: Any) -> Any:
        if kind == "SpyreModel":
            order.append("status")
            if order.count("status") == 1:
                raise SystemExit("killed")
        return real_patch(kind, namespace, name, patch, **kw)

    kube.patch = crash_on_status  # type: ignore[method-assign,assignment]

    def emit(body: dict[str, Any], event: Event, name: str | None = None) -> None:
        order.append(f"event {event.reason}")
        sink(body, event, name)

    with pytest.raises(SystemExit):
        Reconciler(kube, emit, shared=Shared(clock=lambda: "T1")).reconcile(NS, "micro-granite-cpu")
    assert order == ["event Downloading", "status"]
    assert "status" not in kube.get("SpyreModel", NS, "micro-granite-cpu")  # type: ignore[operator]
    Reconciler(kube, emit, shared=Shared(clock=lambda: "T2")).reconcile(NS, "micro-granite-cpu")
    assert order[2:] == ["event Downloading", "status"]
    first, second = (n for n in sink.names if n is not None)
    assert first == second and first.startswith("micro-granite-cpu.")
    assert [e.reason for e in sink.events] == ["Downloading"]  # one Event in the cluster
    # the next transition has a name of its own
    finish_weights(kube)
    Reconciler(kube, emit, shared=Shared(clock=lambda: "T3")).reconcile(NS, "micro-granite-cpu")
    assert [e.reason for e in sink.events] == ["Downloading", "Compiling"]


def test_a_refused_child_is_reported_and_tried_again_quietly(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    rec, events = reconciler(kube)
    finish_compile(kube, rec)
    kube.refuse.add("Deployment")  # refused for real, though its dry run passed
    caplog.set_level("INFO")
    run(rec)
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (status["phase"], degraded["reason"]) == ("Degraded", "ApplyFailed")
    assert "spec.template: Invalid value" in degraded["message"]
    # what was written before the refusal is said too
    done = "(created NetworkPolicy micro-granite-cpu)"
    assert events[-1] == Event("Warning", "ApplyFailed", f"{degraded['message']} {done}")
    writes = kube.writes["PATCH SpyreModel"]
    for _ in range(3):
        retry(rec)
    assert kube.writes["PATCH SpyreModel"] == writes  # same failure, same status
    assert pending(rec) == (4, 80)  # 10s, doubled per failure
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # once, not per attempt
    assert "\n" not in warnings[0].getMessage() and warnings[0].exc_info is None
    # Fixed (the cluster's policy changed): applied on the next attempt, said once.
    kube.refuse.clear()
    retry(rec)
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    assert status["phase"] == "Starting" and pending(rec) == (0, None)
    said = [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()]
    assert said == ["default/micro-granite-cpu: recovered after 4 failed attempts"]


def test_a_retryable_failure_is_one_line_per_attempt_and_a_bug_one_traceback(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    rec, _ = reconciler(kube)
    kube.refuse.add("Job")
    kube.refusal = ApiError(500, "Internal Server Error", {"message": "etcd\nleader changed"})
    caplog.set_level("WARNING", logger=engine.__name__)
    for _ in range(3):
        run(rec)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert "writing Job spyre-weights-" in lines[0] and "etcd leader changed" in lines[0]
    assert not any(r.exc_info for r in caplog.records)
    # A failure of an unexpected kind (a bug): its traceback once, then one line each.
    caplog.clear()
    kube.get = None  # type: ignore[assignment,method-assign]
    for _ in range(3):
        run(rec)
    assert [bool(r.exc_info) for r in caplog.records] == [True, False, False]


def test_a_spec_the_cluster_refuses_is_invalid_before_anything_is_written(
    kube: FakeKube,
) -> None:
    """A quota, a limit range or a policy refuses the serving Deployment: found by the dry
    runs before the download and the compile, not hours later."""
    rec, events = reconciler(kube)
    kube.refuse_dry_run.add("Deployment")
    kube.refusal = ApiError(
        403,
        "Forbidden",
        {
            "message": 'deployments.apps "micro-granite-cpu" is forbidden: '
            "exceeded quota: no-deployments"
        },
    )
    run(rec)
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (status["phase"], degraded["reason"]) == ("Invalid", "Refused")
    assert degraded["message"].startswith("the API server refuses Deployment micro-granite-cpu")
    assert "exceeded quota: no-deployments" in degraded["message"]
    assert dict(kube.writes) == {"PATCH SpyreModel": 1}  # no child, not even the volume
    assert [e.reason for e in events] == ["Refused"] and pending(rec) == (0, None)
    # Before the download: the children that come after it, the compile Job and the
    # Deployment of a hub model (its commit not known yet) included; not those this
    # reconcile writes itself (the volume, the weights Job: their writes check them).
    assert dict(kube.dry_runs) == {"Job": 1, "NetworkPolicy": 1, "Deployment": 1, "Service": 1}
    # The quota is raised: the next reconcile (a resync) goes on; what was admitted is
    # dry-run once per spec, not at every pass that starts a Job.
    kube.refuse_dry_run.clear()
    run(rec)
    assert kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]["phase"] == "Downloading"  # type: ignore[index]
    tried = sum(kube.dry_runs.values())
    finish_weights(kube)  # the commit is known: the same shapes, admitted already
    run(rec)
    assert kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]["phase"] == "Compiling"  # type: ignore[index]
    finish(kube, "compile", {"ok": True, "seconds": 9})
    run(rec)  # writes the Deployment: admitted already
    assert kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]["phase"] == "Starting"  # type: ignore[index]
    assert sum(kube.dry_runs.values()) == tried


@pytest.mark.parametrize(
    "patch",
    [
        {"resources": {"limits": {"cpu": "1e400"}}},
        {"resources": {"limits": {"cpu": "9" * 4400}}},
        {"runtime": {"version": "1" * 6000 + ".0.0"}},
        {"extraArgs": ["--max_model_len=4096"]},
    ],
    ids=["cpu 1e400", "4400-digit cpu", "6000-digit version", "underscore flag"],
)
def test_a_spec_that_crashed_validation_is_invalid_once_without_a_retry(
    kube: FakeKube, patch: dict[str, Any]
) -> None:
    """The fuzz run's poison objects (admitted by the API server) got no status and a
    traceback per retry; now: phase Invalid with validate's words, no child, no retry."""
    kube.patch("SpyreModel", NS, "micro-granite-cpu", {"spec": patch})
    body = kube.get("SpyreModel", NS, "micro-granite-cpu")
    rec, events = reconciler(kube)
    run(rec)
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (status["phase"], degraded["reason"]) == ("Invalid", "InvalidSpec")
    assert degraded["message"] == "; ".join(str(p) for p in validate(body))
    assert (kube.total_writes(), errors(rec), pending(rec)) == (2, 0, (0, None))
    assert [e.reason for e in events] == ["InvalidSpec"]


def test_a_namespace_being_deleted_is_left_to_go(kube: FakeKube) -> None:
    rec, events = reconciler(kube)
    kube.refuse.add("PersistentVolumeClaim")
    kube.refusal = ApiError(  # what the API server answers (tests/integration/test_control_plane)
        403,
        "Forbidden",
        {
            "details": {
                "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]
            }
        },
    )
    run(rec)
    assert (kube.total_writes(), events, errors(rec), pending(rec)) == (1, [], 0, (0, None))


def test_deleted_models_are_left_alone(kube: FakeKube) -> None:
    rec, _ = reconciler(kube)
    rec.reconcile(NS, "gone")
    assert kube.total_writes() == 0


class Counting(FakeKube):
    """Counts the GETs of SpyreModels (what the watch store saves)."""

    def __init__(self) -> None:
        super().__init__()
        self.model_gets = 0

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.model_gets += kind == "SpyreModel"
        return super().get(kind, namespace, name)

    def patch(self, kind: str, namespace: str, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        self.model_gets -= kind == "SpyreModel"  # its own read of the live object
        return super().patch(kind, namespace, name, body, **kw)


def test_the_echo_of_its_own_status_write_needs_no_run() -> None:
    kube = Counting()
    model = example("micro-granite-cpu")
    model["metadata"] |= {"uid": "uid-m", "generation": 1, "namespace": NS}
    kube._store(model)
    store: dict[str, Any] = {}  # the watch store: what the events brought so far
    # a copy, as indexes.stored
    rec = controlled(kube, Sink(), lambda namespace, name: copy.deepcopy(store.get(name)))
    key = ("SpyreModel", NS, "micro-granite-cpu")

    def event() -> None:  # the watch brings the object as it is now
        store["micro-granite-cpu"] = copy.deepcopy(kube.objects[key])
        version = store["micro-granite-cpu"]["metadata"]["resourceVersion"]
        rec.enqueue(NS, "micro-granite-cpu", version)

    event()
    gets = kube.model_gets
    assert rec.queue.loop_stats().waiting["trigger"] == 1
    assert rec.queue.process(block=False)  # from the store: no GET; writes its status
    assert (kube.model_gets, rec.reconciler.stats["status_writes"]) == (gets, 1)
    rec.enqueue(NS, "micro-granite-cpu")  # a child changed before the echo came
    run(rec)  # the store lags behind its own write: read with a GET, nothing to write
    assert (kube.model_gets, rec.reconciler.stats["status_writes"]) == (gets + 1, 1)
    event()  # the echo of the write: no run
    assert rec.queue.take(block=False) is None and rec.echoes.stats["echoes"] == 1
    run(rec)  # a trigger now: the store is as new as its write, read there
    assert (kube.model_gets, rec.queue.stats["reconciles"]) == (gets + 1, 3)
    # The resync lists the version the store holds: read there; another version (the
    # store missed an event, or has a newer one): that pass reads it with a GET.
    rec.listed(NS, "micro-granite-cpu", store["micro-granite-cpu"]["metadata"]["resourceVersion"])
    run(rec)
    assert kube.model_gets == gets + 1
    kube.patch("SpyreModel", NS, "micro-granite-cpu", {"spec": {"replicas": 2}})
    rec.listed(NS, "micro-granite-cpu", kube.objects[key]["metadata"]["resourceVersion"])
    run(rec)
    assert kube.model_gets == gets + 2
    assert kube.objects[key]["status"]["replicas"] == 0  # decided from the listed spec
    event()  # any other version than its write's (a spec change here) is reconciled
    assert rec.queue.take(block=False) == key


def test_a_failed_write_is_reported_then_tried_again(kube: FakeKube) -> None:
    failures = [ApiError(500, "Internal Server Error", {"message": "range is full"})]
    real_create = kube.create

    def flaky_create(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Job" and failures:
            raise failures.pop()
        return real_create(obj)

    kube.create = flaky_create  # type: ignore[method-assign]
    events: list[Event] = []
    compiling = threading.Event()

    def emit(body: dict[str, Any], event: Event, name: str | None = None) -> None:
        events.append(event)
        if event.reason == "Downloading":
            compiling.set()

    rec = controlled(kube, emit)
    run(rec)  # logs the 500, does not raise
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (status["phase"], degraded["reason"]) == ("Degraded", "ApplyFailed")
    assert "Job" in degraded["message"] and "range is full" in degraded["message"]
    assert errors(rec) == 1 and not compiling.is_set()
    assert pending(rec) == (1, 10)

    retry(rec)
    assert compiling.is_set()
    status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (status["phase"], degraded["status"], rec.queue.stats["retries"]) == (
        "Downloading",
        "False",
        1,
    )
    assert [k for k in kube.objects if k[0] == "Job"]
    assert pending(rec) == (0, None)  # the next failure waits 10 s again


def test_deleting_a_model_cancels_its_retry(kube: FakeKube) -> None:
    rec, _ = reconciler(kube)
    kube.refuse.add("PersistentVolumeClaim")
    run(rec)
    assert pending(rec) == (1, 10)
    rec.forget(NS, "micro-granite-cpu")  # its DELETED event
    assert pending(rec) == (0, None)


ON_A_PVC = {"id": "m", "path": "/models/m", "source": {"pvc": {"claimName": "models"}}}


@pytest.mark.parametrize(
    ("seen", "started_seconds", "jobs"),
    [
        ("nothing", 60.0, 1),  # the watch lags: the Job just created holds the one slot
        ("nothing", 0.0, 2),  # ... for STARTED_SECONDS at most
        ("finished", 60.0, 2),  # the watch brought it, finished: the slot is free
    ],
)
def test_a_compile_just_started_counts_until_the_watch_brings_it(
    seen: str, started_seconds: float, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = FakeKube()
    for n, name in enumerate(("a", "b"), 1):
        doc = example("micro-granite-cpu")
        doc["spec"]["model"] = ON_A_PVC
        doc["spec"]["batching"]["continuous"]["maxNumSeqs"] = n
        doc["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1}
        doc["metadata"]["creationTimestamp"] = f"2030-01-01T00:00:0{n}Z"
        kube._store(doc)
    monkeypatch.setattr(shared, "STARTED_SECONDS", started_seconds)

    def watched() -> Queue:
        created = {(NS, n) for (k, _, n), _ in kube.objects.items() if k == "Job"}
        return Queue(Limits(cluster=1), frozenset(), (), frozenset(created))

    queue = watched if seen == "finished" else lambda: Queue(Limits(cluster=1), frozenset(), ())
    rec = Reconciler(kube, Sink(), shared=Shared(compile_queue=queue, clock=lambda: "T"))
    rec.reconcile(NS, "a")
    rec.reconcile(NS, "b")
    assert kube.writes["POST Job"] == jobs
    st = kube.get("SpyreModel", NS, "b")["status"]  # type: ignore[index]
    assert find(st["conditions"], "CacheReady")["reason"] == (
        "Queued" if jobs == 1 else "Compiling"
    )


def test_a_spyrecache_downloads_and_compiles_and_never_serves(kube: FakeKube) -> None:
    """A SpyreCache (a SpyreModel's spec) is reconciled by the same engine, compile only."""
    cache = example("micro-granite-cpu")
    cache["kind"] = CACHE_KIND
    cache["metadata"] |= {"name": "ahead", "uid": "uid-c", "generation": 1, "namespace": NS}
    kube._store(cache)
    sink = Sink()
    rec = Reconciler(kube, sink, CACHE_KIND, shared=Shared(clock=lambda: "T"))
    rec.reconcile(NS, "ahead")
    finish_weights(kube)
    rec.reconcile(NS, "ahead")
    (job,) = [o for (k, _, n), o in kube.objects.items() if k == "Job" and "-compile-" in n]
    assert job["metadata"]["ownerReferences"][0]["kind"] == CACHE_KIND
    finish(kube, "compile", {"ok": True, "seconds": 9, "bytes": 4096})
    rec.reconcile(NS, "ahead")
    status = kube.get(CACHE_KIND, NS, "ahead")["status"]  # type: ignore[index]
    assert status["phase"] == "Ready" and status["cache"]["bytes"] == 4096
    assert [c["type"] for c in status["conditions"]] == [
        "Ready",
        "CacheReady",
        "Degraded",
        "Reconciling",
        "Stalled",
    ]
    assert [e.reason for e in sink.events] == ["Downloading", "Compiling", "Ready"]
    kinds = {k for k, _, _ in kube.objects}
    assert not kinds & {"Deployment", "Service", "NetworkPolicy"}
    writes = kube.total_writes()
    rec.reconcile(NS, "ahead")
    assert kube.total_writes() == writes  # idle


class Rfc3339Clock:
    def __init__(self) -> None:
        self.now = "2030-01-01T00:00:00Z"

    def __call__(self) -> str:
        return self.now


def jobs(kube: FakeKube, part: str) -> list[dict[str, Any]]:
    return [o for (k, _, n), o in kube.objects.items() if k == "Job" and part in n]


def test_a_key_is_listed_kept_while_used_and_cleaned_after_the_retention(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inventory entry's life: made with the compile Job, joins it, says who uses the
    key, writes nothing while idle, and once the last SpyreModel went and the retention
    passed, marks the compile Job, runs the clean-up Job and deletes itself."""
    clock, sink = Rfc3339Clock(), Sink()
    config = Settings(cache_retention="1h")
    models = Reconciler(kube, sink, settings=config, shared=Shared(clock=clock))
    caches = Reconciler(kube, sink, CACHE_KIND, settings=config, shared=Shared(clock=clock))
    finish_compile(kube, models)
    (compile_job,) = jobs(kube, "-compile-")
    compile_job["status"]["completionTime"] = "2030-01-01T00:00:00Z"
    name = compile_job["metadata"]["name"]
    models.reconcile(NS, "micro-granite-cpu")
    (entry,) = [n for k, _, n in kube.objects if k == CACHE_KIND]
    assert (
        entry == "spyre-cache-" + compile_job["metadata"]["labels"]["serving.spyre.dev/cache-key"]
    )
    clock.now = "2030-01-01T00:01:00Z"
    caches.reconcile(NS, entry)
    assert index_agrees(kube) == []
    compile_job = kube.objects[("Job", NS, name)]
    owners = [(r["kind"], r["name"]) for r in compile_job["metadata"]["ownerReferences"]]
    assert owners == [("SpyreModel", "micro-granite-cpu"), (CACHE_KIND, entry)]
    status = kube.get(CACHE_KIND, NS, entry)["status"]  # type: ignore[index]
    assert status["phase"] == "Ready" and "weights" in status  # pinned: no weights Job of its own
    assert (status["usedBy"], status["lastUsedAt"]) == (["micro-granite-cpu"], clock.now)
    assert status["compiledAt"] == "2030-01-01T00:00:00Z"
    assert status["runtime"] == "vllm-spyre 1.10.0"  # the plugin version the spec names
    assert len(jobs(kube, "-weights-")) == 1
    writes = kube.total_writes()
    clock.now = "2030-01-02T00:00:00Z"  # a day later, still used
    for rec, who in ((models, "micro-granite-cpu"), (caches, entry)):
        rec.reconcile(NS, who)
    assert kube.total_writes() == writes  # idle: nothing written, the clock aside

    # The SpyreModel goes: the key is unused from now on, the retention runs.
    kube.delete("SpyreModel", NS, "micro-granite-cpu")
    kube.collect_garbage()
    again = caches.reconcile(NS, entry).requeue_after
    status = kube.get(CACHE_KIND, NS, entry)["status"]  # type: ignore[index]
    assert (status["usedBy"], status["lastUsedAt"]) == ([], clock.now)
    assert again == 3600  # then it looks again
    assert jobs(kube, "-cleanup-") == []
    writes = kube.total_writes()
    clock.now = "2030-01-02T00:59:59Z"
    caches.reconcile(NS, entry)
    assert kube.total_writes() == writes and jobs(kube, "-cleanup-") == []

    clock.now = "2030-01-02T01:00:00Z"
    caches.reconcile(NS, entry)
    compile_job = kube.objects[("Job", NS, name)]
    assert compile_job["metadata"]["annotations"]["serving.spyre.dev/cleanup"] == clock.now
    (cleanup,) = jobs(kube, "-cleanup-")
    (ref,) = cleanup["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == (CACHE_KIND, entry, True)
    container = cleanup["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["clean"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (
        env["SPYRE_SERVING_CACHE_KEY"]
        == compile_job["metadata"]["annotations"]["serving.spyre.dev/cache-key"]
    )
    assert kube.get(CACHE_KIND, NS, entry)["status"]["phase"] == "CleaningUp"  # type: ignore[index]

    # A SpyreModel of that key now waits for the clean-up instead of joining.
    model = example("micro-granite-cpu")
    model["metadata"] |= {"name": "again", "uid": "uid-again", "generation": 1, "namespace": NS}
    kube._store(model)
    models.reconcile(NS, "again")
    finish_weights(kube)  # its own download (the first one's Job went with its model)
    again = models.reconcile(NS, "again").requeue_after
    compile_job = kube.objects[("Job", NS, name)]
    assert "uid-again" not in {r["uid"] for r in compile_job["metadata"]["ownerReferences"]}
    status = kube.get("SpyreModel", NS, "again")["status"]  # type: ignore[index]
    assert find(status["conditions"], "CacheReady")["reason"] == "CleaningUp"
    assert again == 10.0  # it looks again

    finish(kube, "cleanup", {"ok": True, "bytes": 4096})
    caches.reconcile(NS, entry)
    assert kube.get(CACHE_KIND, NS, entry) is None
    assert sink.events[-1].reason == "CleanedUp"
    kube.collect_garbage()
    assert jobs(kube, "-compile-") == jobs(kube, "-cleanup-") == []
    models.reconcile(NS, "again")  # compiled again
    assert len(jobs(kube, "-compile-")) == 1


def listed(
    kube: FakeKube, retention: str = "1s"
) -> tuple[Rfc3339Clock, Reconciler, Reconciler, str]:
    """A compiled key whose entry joined its Job: the clock, both reconcilers (unused keys
    kept for `retention`), the entry."""
    clock, sink = Rfc3339Clock(), Sink()
    config = Settings(cache_retention=retention)
    models = Reconciler(kube, sink, settings=config, shared=Shared(clock=clock))
    caches = Reconciler(kube, sink, CACHE_KIND, settings=config, shared=Shared(clock=clock))
    finish_compile(kube, models)
    models.reconcile(NS, "micro-granite-cpu")
    (entry,) = [n for k, _, n in kube.objects if k == CACHE_KIND]
    caches.reconcile(NS, entry)
    return clock, models, caches, entry


def test_a_key_in_use_or_asked_for_is_never_cleaned(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, _models, caches, entry = listed(kube)
    clock.now = "2031-01-01T00:00:00Z"  # a year later
    caches.reconcile(NS, entry)
    assert jobs(kube, "-cleanup-") == []  # used
    # a user's SpyreCache of the key, then the SpyreModel goes: still asked for
    user = example("micro-granite-cpu")
    user["kind"] = CACHE_KIND
    user["metadata"] |= {"name": "mine", "uid": "uid-mine", "generation": 1, "namespace": NS}
    kube._store(user)
    caches.reconcile(NS, "mine")
    kube.delete("SpyreModel", NS, "micro-granite-cpu")
    kube.collect_garbage()
    clock.now = "2032-01-01T00:00:00Z"
    for name in (entry, "mine"):
        caches.reconcile(NS, name)
    assert jobs(kube, "-cleanup-") == []
    status = kube.get(CACHE_KIND, NS, "mine")["status"]  # type: ignore[index]
    assert status["usedBy"] == [] and status["phase"] == "Ready"


def test_a_model_joining_as_the_clean_up_starts_makes_one_of_the_two_writes_fail(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both decided from the same compile Job: whichever writes second gets a 409 and
    decides again from what the first wrote."""
    clock, models, caches, entry = listed(kube)
    kube.delete("SpyreModel", NS, "micro-granite-cpu")
    kube.collect_garbage()
    caches.reconcile(NS, entry)
    model = example("micro-granite-cpu")
    model["metadata"] |= {"name": "late", "uid": "uid-late", "generation": 1, "namespace": NS}
    kube._store(model)
    models.reconcile(NS, "late")
    finish_weights(kube)
    clock.now = "2030-01-01T01:00:00Z"
    cleanup_plan = caches.plan(kube.get(CACHE_KIND, NS, entry), clock.now)
    join_plan = models.plan(kube.get("SpyreModel", NS, "late"), clock.now)
    (join,) = [a for a in join_plan.actions if a.verb == "add-owner"]
    assert join.obj["metadata"]["resourceVersion"]  # guarded: the key is unused
    (mark,) = [a for a in cleanup_plan.actions if a.verb == "mark"]
    execute(kube, join)
    with pytest.raises(ApiError) as refused:
        execute(kube, mark)
    assert refused.value.conflict
    caches.reconcile(NS, entry)  # decides again: used
    assert jobs(kube, "-cleanup-") == []
    # the other order: the mark first, the join fails, and the model waits
    kube.delete("SpyreModel", NS, "late")
    kube.collect_garbage()
    caches.reconcile(NS, entry)
    clock.now = "2030-01-01T02:00:00Z"
    kube._store(copy.deepcopy(model) | {"metadata": model["metadata"] | {"uid": "uid-late2"}})
    models.reconcile(NS, "late")
    finish_weights(kube)
    cleanup_plan = caches.plan(kube.get(CACHE_KIND, NS, entry), clock.now)
    join_plan = models.plan(kube.get("SpyreModel", NS, "late"), clock.now)
    (join,) = [a for a in join_plan.actions if a.verb == "add-owner"]
    execute(kube, next(a for a in cleanup_plan.actions if a.verb == "mark"))
    with pytest.raises(ApiError) as refused:
        execute(kube, join)
    assert refused.value.conflict
    models.reconcile(NS, "late")
    status = kube.get("SpyreModel", NS, "late")["status"]  # type: ignore[index]
    assert find(status["conditions"], "CacheReady")["reason"] == "CleaningUp"


def test_a_failed_clean_up_is_said_and_the_entry_stays(
    kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, _models, caches, entry = listed(kube)
    kube.delete("SpyreModel", NS, "micro-granite-cpu")
    kube.collect_garbage()
    caches.reconcile(NS, entry)
    clock.now = "2030-01-01T01:00:00Z"
    caches.reconcile(NS, entry)
    refusal = {"ok": False, "reason": "InvalidConfig", "message": "/var/cache/spyre/k is a symlink"}
    finish(kube, "cleanup", refusal)  # its pod said why, and the Job failed
    (cleanup,) = jobs(kube, "-cleanup-")
    cleanup["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    caches.reconcile(NS, entry)
    status = kube.get(CACHE_KIND, NS, entry)["status"]  # type: ignore[index]
    degraded = find(status["conditions"], "Degraded")
    assert (status["phase"], degraded["reason"]) == ("Failed", "CleanupFailed")
    assert "is a symlink" in degraded["message"] and "Delete this SpyreCache" in degraded["message"]
    assert kube.get(CACHE_KIND, NS, entry) is not None


def test_the_inventory_entry_waits_while_other_reconciles_wait(kube: FakeKube) -> None:
    """A burst's compile Jobs go first: the entry is made by a pass in the queue's low lane."""
    rec, events = reconciler(kube)
    run(rec)
    finish_weights(kube)
    run(rec)  # the compile Job
    rec.enqueue(NS, "micro-granite-cpu")
    rec.enqueue(NS, "other")  # a burst: another key waits
    assert rec.queue.process(block=False)  # the Job seen, the entry not made: later
    assert kube.writes["POST SpyreCache"] == 0
    assert rec.queue.process(block=False)  # "other" first (it is gone: nothing to do)
    assert kube.writes["POST SpyreCache"] == 0
    assert rec.queue.process(block=False)  # then the low lane
    assert kube.writes["POST SpyreCache"] == 1 and events[-1].reason == "CreatedCacheEntry"
    assert not rec.queue.process(block=False)


def test_a_missing_spyrecache_crd_is_said_once_skipped_and_tried_again_later(
    kube: FakeKube, caplog: pytest.LogCaptureFixture
) -> None:
    """No inventory without the SpyreCache kind: one WARNING, no Degraded, the model goes
    on; the entry is tried again `UNSERVED_SECONDS` later (the CRD may be installed)."""
    clock = Clock()
    rec = Reconciler(
        kube, Sink(), shared=Shared(unserved=shared.Unserved(clock), clock=lambda: "T")
    )
    kube.refuse, kube.refusal = {CACHE_KIND}, ApiError(404, "NotFound", {"details": {}})
    finish_compile(kube, rec)
    with caplog.at_level("INFO", logger="spyre_operator.reconcile"):
        for _ in range(3):
            rec.reconcile(NS, "micro-granite-cpu")
        assert kube.writes["POST SpyreCache"] == 1
        status = kube.get("SpyreModel", NS, "micro-granite-cpu")["status"]  # type: ignore[index]
        assert status["phase"] == "Starting"
        assert find(status["conditions"], "Degraded")["status"] == "False"
        clock.now += shared.UNSERVED_SECONDS
        rec.reconcile(NS, "micro-granite-cpu")  # tried again: still missing, said once
        assert kube.writes["POST SpyreCache"] == 2
        warned = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warned) == 1 and "does not serve SpyreCache" in warned[0].message
        kube.refuse = set()  # the CRD installed
        clock.now += shared.UNSERVED_SECONDS
        rec.reconcile(NS, "micro-granite-cpu")
    assert kube.get(CACHE_KIND, NS, meta.inventory_name(status["targetCacheKey"])) is not None
    assert any("serves SpyreCache now" in r.message for r in caplog.records)


def test_a_404_names_a_missing_kind_unless_it_names_the_namespace() -> None:
    gone = {"details": {"name": "ns", "kind": "namespaces"}, "message": 'namespaces "ns" not found'}
    assert ApiError(404, "NotFound", {"details": {}}).kind_unserved
    assert not ApiError(404, "NotFound", gone).kind_unserved
    assert not ApiError(409, "AlreadyExists").kind_unserved


def test_children_that_exist_are_not_dry_run(kube: FakeKube) -> None:
    """A second SpyreModel on the same cache volume: the volume was admitted (a dry run of
    its create would only answer 409), so a new spec's dry runs skip it."""
    rec, _ = reconciler(kube)
    run(rec)
    finish_weights(kube)  # the second joins the download and starts its compile at once
    second = example("micro-granite-cpu")
    second["spec"]["batching"]["continuous"]["maxNumSeqs"] = 2
    second["metadata"] |= {"name": "second", "uid": "uid-2", "generation": 1, "namespace": NS}
    kube._store(second)
    run(rec, "second")
    assert [k for k, _, _ in kube.objects].count("PersistentVolumeClaim") == 1
    assert kube.dry_runs["PersistentVolumeClaim"] == 0
    assert kube.writes["POST Job"] == 2  # the first's download, the second's compile
    assert kube.dry_runs["Deployment"] == 2  # the second's spec was dry-run
