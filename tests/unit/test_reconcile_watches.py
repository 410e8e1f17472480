"""The children's watches (kube/watches.py) against a scripted API server: the store
and its first listing, paging, events after the store, bookmarks, and the re-list of an
expired watch with what changed meanwhile delivered."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from apilib import example

from spyre_operator.controller.indexes import model_entry, stored
from spyre_operator.kube import entries
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.kube.entries import index_entry
from spyre_operator.kube.indexed import IndexedKube
from spyre_operator.kube.watches import SELECTOR, Source, Store, Watch, Watches
from spyre_operator.reconcile.pods import pod_issues, pod_starts
from spyre_operator.render import meta

pytestmark = pytest.mark.unit


def job(name: str, version: str, namespace: str = "ns") -> dict[str, Any]:
    metadata = {"name": name, "namespace": namespace, "resourceVersion": version}
    return {"metadata": metadata, "spec": {"template": {"x": 1}}, "status": {"active": 1}}


def page(items: list[dict[str, Any]], version: str, token: str = "") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": version, "continue": token}, "items": items}


class Server(Kube):
    """Answers the watch's LISTs and WATCHes from scripts, in order; sets `stop` when the
    watch scripts run out. Records every request's query."""

    def __init__(self, lists: list[Any], watches: list[Any], stop: threading.Event) -> None:
        super().__init__(None)  # its requests are answered here
        self.lists, self.watches, self.stop = lists, watches, stop
        self.queries: list[dict[str, str]] = []
        self.urls: list[str] = []

    def request(self, method: str, url: str, query: dict[str, str]) -> dict[str, Any]:
        self.queries.append(query)
        self.urls.append(url)
        if not self.lists:  # a request the test did not expect: end the watch
            self.stop.set()
            raise ApiError(418, "unexpected")
        answer = self.lists.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        assert isinstance(answer, dict)
        return answer

    def watch(self, url: str, query: dict[str, str], timeout: float) -> Iterator[Any]:
        self.queries.append(query)
        self.urls.append(url)
        if not self.watches:
            self.stop.set()
            return
        script = self.watches.pop(0)
        if isinstance(script, ApiError):
            raise script
        yield from script


def run(lists: list[Any], watches: list[Any], namespace: str | None = None) -> Any:
    """One Watch of Jobs through the scripts: (store, delivered events, server, received)."""
    stop, store = threading.Event(), Store("jobs")
    delivered: list[tuple[str | None, str, dict[str, Any] | None]] = []

    def deliver(event_type: str | None, body: dict[str, Any]) -> None:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        delivered.append((event_type, body["metadata"]["name"], store.get(key)))

    server = Server(lists, watches, stop)
    received: Counter[str] = Counter()
    watch = Watch(
        server, Source("Job", store, deliver), namespace, received, threading.Lock(), stop
    )
    watch.run()
    assert watch.synced.is_set() and not server.lists and not server.watches
    assert {q["labelSelector"] for q in server.queries} == {SELECTOR}
    where = f"namespaces/{namespace}/" if namespace else ""
    assert set(server.urls) == {f"/apis/batch/v1/{where}jobs"}
    return store, delivered, server, received


def test_the_first_listing_fills_the_store_page_by_page_and_delivers_nothing() -> None:
    lists = [page([job("a", "5")], "", token="t"), page([job("b", "6")], "9")]
    store, delivered, server, received = run(lists, [])
    assert delivered == []
    assert sorted(e["metadata"]["name"] for e in store.values()) == ["a", "b"]
    assert server.queries[1]["continue"] == "t"
    assert server.queries[2]["resourceVersion"] == "9"  # the watch starts from the list's
    assert server.queries[2]["allowWatchBookmarks"] == "true"
    assert received == {"Job": 2}
    # only what the reconciler reads is kept: no pod template
    assert store.get(("ns", "a")) == {
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"},
        "spec": {},
        "status": {"active": 1},
    }


def test_events_update_the_store_before_they_are_delivered_and_bookmarks_move_on() -> None:
    events = [
        {"type": "ADDED", "object": job("c", "10")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
        {"type": "DELETED", "object": job("a", "13")},
    ]
    store, delivered, server, received = run([page([job("a", "5")], "9")], [events])
    assert [(t, n) for t, n, _ in delivered] == [("ADDED", "c"), ("DELETED", "a")]
    assert delivered[0][2] is not None and delivered[1][2] is None  # the store, before
    assert [e["metadata"]["name"] for e in store.values()] == ["c"]
    assert server.queries[-1]["resourceVersion"] == "13"  # the next watch resumes there
    assert received == {"Job": 3}  # a bookmark is not an object


def test_an_expired_watch_lists_again_and_delivers_what_changed_meanwhile() -> None:
    first = page([job("a", "5"), job("b", "5"), job("other", "5", namespace="elsewhere")], "9")
    again = page([job("a", "5"), job("c", "20")], "21")  # b went, c came while away
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    store, delivered, server, _ = run([first, again], [[gone]], namespace="ns")
    assert sorted((t, n) for t, n, _ in delivered) == [("ADDED", "c"), ("DELETED", "b")]
    assert sorted(e["metadata"]["name"] for e in store.values()) == ["a", "c", "other"]
    assert server.queries[-1]["resourceVersion"] == "21"


def test_a_410_at_the_start_of_a_watch_or_of_a_page_lists_again() -> None:
    expired = ApiError(410, "Gone", {"message": "too old resource version"})
    lists = [page([job("a", "5")], "9"), expired, page([job("a", "6")], "30")]
    _, delivered, server, _ = run(lists, [expired])
    assert [(t, n) for t, n, _ in delivered] == [("MODIFIED", "a")]
    assert server.queries[-1]["resourceVersion"] == "30"


def test_store_replace_reports_differences_in_its_namespace_only() -> None:
    store = Store("jobs")
    assert [t for t, _ in store.replace([job("a", "1"), job("x", "1", "other")])] == [
        "ADDED",
        "ADDED",
    ]
    events = store.replace([job("a", "1"), job("b", "2")], namespace="ns")
    assert [(t, e["metadata"]["name"]) for t, e in events] == [("ADDED", "b")]
    assert store.get(("other", "x")) is not None  # another namespace's watch owns it
    assert store.replace([], namespace="ns") == [
        ("DELETED", store_entry("a", "1")),
        ("DELETED", store_entry("b", "2")),
    ]


def store_entry(name: str, version: str) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ns", "resourceVersion": version}
    return {"metadata": metadata, "spec": {}, "status": {"active": 1}}


def test_wait_synced_returns_false_once_stopped() -> None:
    class Never(Kube):
        def request(self, *_: Any, **__: Any) -> dict[str, Any]:
            raise ApiError(403, "Forbidden")

    watches = Watches(Never(None), [Source("Job", Store("jobs"), None)], ["ns"])
    watches.close()
    assert watches.wait_synced() is False


def test_the_nodes_are_watched_once_unselected_and_the_start_does_not_wait_for_them() -> None:
    store = Store("nodes")
    raw = {"metadata": {"name": "n1", "resourceVersion": "4"}, "status": {"allocatable": {}}}
    server = Server([page([raw], "9")], [], threading.Event())
    nodes = Source("Node", store, None, selector=None, cluster=True, awaited=False)
    watches = Watches(server, [nodes, Source("Job", Store("jobs"), None)], ["a", "b"])
    server.stop = watches.stop  # the scripts' end ends the watches
    assert [t.namespace for t in watches.threads if t.source is nodes] == [None]
    (thread,) = [t for t in watches.threads if t.source is nodes]
    thread.run()
    assert server.urls[0] == "/api/v1/nodes" and "labelSelector" not in server.queries[0]
    assert [e["metadata"]["name"] for e in store.values()] == ["n1"]
    assert watches.synced("Node") and not watches.synced("Job")
    assert watches.wait_synced() is False  # it waited for the Jobs, not for the nodes


def serving_pod(name: str, namespace: str, model: str) -> dict[str, Any]:
    waiting = {"reason": "CrashLoopBackOff", "message": "back-off"}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": "3",
            "creationTimestamp": "2026-11-25T00:00:00Z",
            "labels": meta.server_selector(model) | {"pod-template-hash": "x"},
            "annotations": {"big": "x" * 1000},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"containers": [{"name": "serve", "image": "i"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "serve", "image": "i", "state": {"waiting": waiting}, "lastState": {}}
            ],
        },
    }


def test_a_pod_is_kept_with_only_what_observe_reads() -> None:
    (entry,) = index_entry("pods", serving_pod("p", "ns", "m")).values()
    assert entry == {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "resourceVersion": "3",
            "creationTimestamp": "2026-11-25T00:00:00Z",
            "labels": meta.server_selector("m") | {"pod-template-hash": "x"},
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "serve",
                    "image": "i",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {},
                }
            ],
        },
    }
    # what observe makes of it is what it makes of the whole pod
    assert pod_issues([entry]) == pod_issues([serving_pod("p", "ns", "m")])
    # a pod a node started: when (the wait for a node a compile's status shows)
    started = serving_pod("p", "ns", "m")
    started["status"]["startTime"] = "2026-11-25T00:04:10Z"
    (kept,) = index_entry("pods", started).values()
    assert pod_starts([kept]) == pod_starts([started])
    assert pod_starts([kept])[0].started == "2026-11-25T00:04:10Z"


@pytest.mark.parametrize("by", [(meta.MODEL_LABEL, meta.JOB_NAME_LABEL), ()])
def test_the_pod_list_of_the_reconciler_is_answered_from_the_store_without_a_request(
    by: tuple[str, ...],
) -> None:
    pods = Store("pods", by=by)  # indexed by the model's label, or not: the same answers
    for name, ns, model in [("p1", "ns", "m"), ("p2", "ns", "other"), ("p3", "ns2", "m")]:
        pods.event("ADDED", serving_pod(name, ns, model))
    kube = IndexedKube(api=None, stores={"pods": pods})  # no request

    def names(selector: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in kube.list("Pod", "ns", selector))

    assert names(meta.selector_string("m")) == ["p1"]
    assert names(f"{meta.COMPONENT_LABEL}={meta.SERVER}") == ["p1", "p2"]
    assert names(f"{meta.JOB_NAME_LABEL}=j") == [] and kube.reads == 0
    pods.event("MODIFIED", serving_pod("p2", "ns", "m"))  # relabelled: found by its new label
    assert names(meta.selector_string("m")) == ["p1", "p2"] and names("x=y") == []
    assert names(meta.selector_string("other")) == []
    pods.event("DELETED", serving_pod("p1", "ns", "m"))
    pods.replace([serving_pod("p3", "ns2", "m")], "ns2")  # a re-list of another namespace
    assert names(meta.selector_string("m")) == ["p2"]
    pods.replace([], "ns")
    assert names(meta.selector_string("m")) == []
    assert all(ns == "ns2" for ns, _, _ in pods._index)  # nothing left of the gone pods
    with pytest.raises(ValueError, match="only k=v label selectors"):
        kube.list("Pod", "ns", "a!=b")


def test_a_kind_without_a_complete_store_is_listed_by_the_api_server() -> None:
    asked: list[tuple[str, dict[str, str] | None]] = []

    class Counting(IndexedKube):
        def request(self, method: str, url: str, body: Any = None, **kw: Any) -> dict[str, Any]:
            asked.append((url, kw.get("query")))
            return {"items": []}

    stores = {"persistentvolumeclaims": Store("pvcs", complete=False), "pods": Store("pods")}
    kube = Counting(api=None, stores=stores)
    assert kube.list("PersistentVolumeClaim", "ns", "a=b") == []
    assert kube.list("Pod", "ns", "job-name=j") == [] and asked == [  # from the store
        ("/api/v1/namespaces/ns/persistentvolumeclaims", {"labelSelector": "a=b"})
    ]
    # what a finished Job left in its pods: as the API server has it, whatever the store
    assert kube.list("Pod", "ns", "job-name=j", consistent=True) == []
    assert asked[1] == ("/api/v1/namespaces/ns/pods", {"labelSelector": "job-name=j"})


def test_entries_of_separately_parsed_events_share_their_keys_and_short_strings() -> None:
    """Each event is parsed on its own; the stores keep one copy of each key and label."""
    label, long = "app.kubernetes.io/managed-by", "x" * 65
    first, second = (
        json.loads(json.dumps(job(name, "1") | {"status": {"message": long}}))
        for name in ("a", "b")
    )
    for body in (first, second):
        body["metadata"]["labels"] = {label: "spyre-operator"}
    (a,), (b,) = index_entry("jobs", first).values(), index_entry("jobs", second).values()
    assert a["metadata"]["labels"] == b["metadata"]["labels"] == {label: "spyre-operator"}
    ((key_a, value_a),), ((key_b, value_b),) = (
        a["metadata"]["labels"].items(),
        b["metadata"]["labels"].items(),
    )
    assert key_a is key_b and value_a is value_b  # one object each, not one per entry
    assert a["status"]["message"] == long and a["status"]["message"] is not b["status"]["message"]


def test_a_model_is_indexed_whole_but_its_managed_fields_for_its_reconciles_to_read() -> None:
    """The watch store the reconciles read (kopf's index): the object as its event brought
    it, without the managedFields, with the compile Job it wants (the compile queue)."""
    body = example("micro-granite-cpu")
    body["metadata"] |= {"namespace": "ns", "resourceVersion": "7", "uid": "u"}
    # its weights downloaded (the example's revision): it wants its compile Job
    body["status"] = {
        "weights": {"state": "Ready", "commit": "6e9c6465a9d7e5e9fa35004a29f0c90befa7d23f"}
    }
    body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    (key, entry), *_ = model_entry(body).items()
    metadata = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
    assert key == ("ns", "micro-granite-cpu") and entry.body == body | {"metadata": metadata}
    assert entry.want is not None and entry.want.name == "micro-granite-cpu"
    index = {key: [entry]}  # kopf's index: key -> the values of the objects under it
    assert stored(index, "ns", "micro-granite-cpu") == entry.body  # a copy each time
    assert stored(index, "ns", "micro-granite-cpu") is not stored(index, "ns", "micro-granite-cpu")
    assert stored(index, "ns", "other") is None


def test_bodies_pack_small_with_the_first_written_status_of_their_kind_as_the_dictionary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The index keeps every body: after the first one with a status the operator wrote,
    a fleet's similar bodies of that kind pack with it as zlib's dictionary, and each
    unpacks as it was (those packed before it too). SpyreCaches have their own."""
    monkeypatch.setattr(entries, "PRESETS", {})

    def body(name: str, status: bool, kind: str = "SpyreModel") -> dict[str, Any]:
        found = example("micro-granite-cpu") | {"kind": kind}
        found["metadata"] |= {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
        if status:
            found["status"] = {
                "phase": "Compiling",
                "conditions": [{"type": "Ready", "status": "False", "reason": "Compiling",
                                "message": f"Job of {name} is compiling cache 0123456789ab"}],
            }  # fmt: skip
        return found

    early = next(iter(model_entry(body("a0", False)).values()))
    first = next(iter(model_entry(body("a1", True)).values()))
    later = next(iter(model_entry(body("a2", True)).values()))
    assert (early.with_preset, first.with_preset, later.with_preset) == (False, True, True)
    assert len(later.packed) < len(early.packed) / 4  # shares nearly all of the first
    assert (early.body, later.body) == (
        body("a0", False) | {"metadata": early.body["metadata"]},
        body("a2", True) | {"metadata": later.body["metadata"]},
    )
    assert later.body["metadata"]["name"] == "a2"
    cache = next(iter(model_entry(body("c0", True, "SpyreCache")).values()))
    assert cache.preset is not later.preset and cache.body == body("c0", True, "SpyreCache")


def test_a_childs_spec_is_kept_packed_and_every_read_brings_it_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What drift compares of a Deployment (its spec) is packed in the store, the first
    one as the dictionary: the others pack small; a read unpacks a copy of its own."""
    monkeypatch.setattr(entries, "PRESETS", {})

    def deployment(name: str) -> dict[str, Any]:
        container = {
            "name": "serve",
            "image": "quay.io/x/vllm-spyre:1.10",
            "args": ["--model", f"/models/{name}", "--max-model-len", "2048"],
            "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
            "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
        }
        return {
            "metadata": {"name": name, "namespace": "ns", "labels": {"model": name}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [container]}}},
            "status": {"replicas": 1},
        }

    store = Store("deployments")
    for name in ("a", "b"):
        store.event("ADDED", deployment(name))
    kept = store._items[("ns", "b")]["spec"]
    assert isinstance(kept, entries.PackedSpec) and kept.with_preset
    assert len(kept.packed) < len(json.dumps(deployment("b")["spec"])) / 4
    read = store.get(("ns", "b"))
    assert read == index_entry("deployments", deployment("b"))[("ns", "b")] | {
        "spec": deployment("b")["spec"]
    }
    assert read is not None and read["spec"] is not store.get(("ns", "b"))["spec"]
    assert [e["spec"] for e in store.values()] == [deployment(n)["spec"] for n in "ab"]
    assert [e["spec"] for e in store.select("ns", {"model": "a"})] == [deployment("a")["spec"]]
    events = store.replace([deployment("a")])  # b went: delivered with its spec
    assert [(t, e["spec"]) for t, e in events] == [("DELETED", deployment("b")["spec"])]
