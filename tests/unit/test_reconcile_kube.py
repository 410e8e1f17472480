"""The operator's client over real HTTP: `Kube` (with the installed kubernetes client)
against a small local stub server that records each request and answers as told, so the
serialization (path, query, headers, body) and the error mapping are covered without a
cluster, at whatever client version is installed."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from spyre_operator.kube.client import APPLY, STRATEGIC, ApiError, Kube, load_api_client

pytestmark = pytest.mark.unit

TOKEN = "stub-token"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Stub:
    """The requests seen, and the answers to give (status, JSON body), oldest first."""

    seen: list[Seen] = field(default_factory=list)
    answers: list[tuple[int, Any]] = field(default_factory=list)


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            stub.seen.append(
                Seen(
                    self.command,
                    url.path,
                    urllib.parse.parse_qs(url.query),
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
            )
            status, body = stub.answers.pop(0) if stub.answers else (200, {})
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler


@pytest.fixture
def stub() -> Iterator[tuple[Stub, int]]:
    state = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def kube(stub: tuple[Stub, int], tmp_path: Path) -> Kube:
    _, port = stub
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "op", "user": {"token": TOKEN}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "op"}}],
        "current-context": "stub",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Kube(load_api_client(str(path)))


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "m", "namespace": "ns"},
    "spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"x/y": "4"}}}]}}},
}


def test_apply_is_a_server_side_apply_of_the_whole_manifest(
    stub: tuple[Stub, int], kube: Kube
) -> None:
    state, _ = stub
    state.answers.append((200, DEPLOYMENT | {"status": {}}))
    assert kube.apply(DEPLOYMENT)["status"] == {}
    (seen,) = state.seen
    assert (seen.method, seen.path) == ("PATCH", "/apis/apps/v1/namespaces/ns/deployments/m")
    assert seen.query == {"fieldManager": ["spyre-operator"], "force": ["true"]}
    assert seen.headers["content-type"] == APPLY
    assert seen.headers["accept"] == "application/json"
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert seen.body == DEPLOYMENT  # the quantity stays the string "4"
    assert kube.writes == {"APPLY Deployment": 1}


def test_reads_lists_and_other_writes(stub: tuple[Stub, int], kube: Kube) -> None:
    state, _ = stub
    state.answers += [
        (200, {"metadata": {"name": "j"}}),
        (404, {"kind": "Status", "reason": "NotFound", "message": "not found"}),
        (200, {"items": [{"metadata": {"name": "p"}}]}),
        (201, {"metadata": {"name": "e"}}),
        (200, {}),
    ]
    assert kube.get("Job", "ns", "j") == {"metadata": {"name": "j"}}
    assert kube.get("Job", "ns", "gone") is None
    selector = "serving.spyre.dev/model=m,app.kubernetes.io/component=server"
    assert kube.list("Pod", "ns", selector) == [{"metadata": {"name": "p"}}]
    event = {"kind": "Event", "metadata": {"namespace": "ns", "generateName": "x-"}}
    kube.create(event)
    owner = {"metadata": {"ownerReferences": [{"uid": "u"}]}}
    kube.patch("Job", "ns", "j", owner, content_type=STRATEGIC)
    calls = [(s.method, s.path) for s in state.seen]
    assert calls == [
        ("GET", "/apis/batch/v1/namespaces/ns/jobs/j"),
        ("GET", "/apis/batch/v1/namespaces/ns/jobs/gone"),
        ("GET", "/api/v1/namespaces/ns/pods"),
        ("POST", "/api/v1/namespaces/ns/events"),
        ("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j"),
    ]
    assert state.seen[2].query == {"labelSelector": [selector]}
    assert state.seen[3].body == event
    assert state.seen[4].headers["content-type"] == STRATEGIC
    assert state.seen[4].query == {"fieldManager": ["spyre-operator"]}
    assert kube.writes == {"POST Event": 1, "PATCH Job": 1}


def test_the_status_subresource_is_merge_patched(stub: tuple[Stub, int], kube: Kube) -> None:
    state, _ = stub
    kube.patch("SpyreModel", "ns", "m", {"status": {"phase": "Ready"}}, sub="status")
    (seen,) = state.seen
    assert seen.path == "/apis/serving.spyre.dev/v1alpha1/namespaces/ns/spyremodels/m/status"
    assert seen.headers["content-type"] == "application/merge-patch+json"
    assert kube.writes == {"PATCH SpyreModel/status": 1}


def test_errors_carry_the_status_and_the_servers_explanation(
    stub: tuple[Stub, int], kube: Kube
) -> None:
    state, _ = stub
    terminating = {
        "message": "forbidden: unable to create new content in namespace ns",
        "details": {"causes": [{"reason": "NamespaceTerminating"}]},
    }
    state.answers += [
        (409, {"message": 'jobs.batch "j" already exists'}),
        (403, terminating),
        (500, {"message": "expected string"}),
    ]
    job = {"kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    with pytest.raises(ApiError) as conflict:
        kube.create(job)
    assert conflict.value.conflict and "already exists" in str(conflict.value)
    with pytest.raises(ApiError) as refused:
        kube.create(job)
    assert refused.value.namespace_terminating and not refused.value.conflict
    with pytest.raises(ApiError) as broken:
        kube.apply(DEPLOYMENT)
    assert broken.value.status == 500 and "expected string" in str(broken.value)
