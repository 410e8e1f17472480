"""Two nodes (`cluster up --node --nodes 2`, docs/node.md): both Ready with their cards;
one pod network and kube-proxy across both; a 2-replica model spread over them by its
topologySpreadConstraints; a drain of one node moves its replica to the other, a drain of
that one then keeps a replica serving (the PodDisruptionBudget), and a client sending
completions through the Service all along loses none.

Both nodes run on one host, so the model's cache volume (the testbed's hostPath
provisioner) is one folder that both nodes see: this is NOT network storage. The replica
on the second node reads the graphs the compile Job wrote through that shared folder, not
through a network filesystem with its own caching and rename semantics.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, Requests, SharedNode, apply, import_python_image, pod

from spyre_devcluster import node_operator
from spyre_devcluster.kubectl import KubectlError
from spyre_devcluster.node import Node
from spyre_devcluster.node_config import SPYRE_PF
from spyre_devcluster.simulate import poll_until
from spyre_operator.cli import main

pytestmark = pytest.mark.node

NODES = 2
NAME = "spread"
MODEL = f"serving.spyre.dev/model={NAME}"
WAIT = 1500  # a compile plus serving starts, on a loaded 2-core machine
PORT = 8080
# answers every GET with the name of the node it runs on
SERVE = f"""
import http.server, os
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = os.environ["NODE"].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("", {PORT}), Handler).serve_forever()
"""
# prints what a pod IP answers, then the set of nodes the Service's answers came from
FETCH = """
import json, sys, urllib.request
get = lambda url: urllib.request.urlopen(url, timeout=10).read().decode()
peer, service = sys.argv[1:]
seen = set()
while len(seen) < 2:
    seen.add(get(service))
print(json.dumps({"peer": get(peer), "service": sorted(seen)}))
"""


@pytest.fixture
def namespace(shared_node: SharedNode) -> Iterator[Kubectl]:
    node = shared_node.get(NODES)
    name = f"two-{uuid.uuid4().hex[:8]}"
    yield node_operator.make_namespace(node, name)
    node_operator.delete_namespace(node, name)


def test_both_nodes_are_ready_with_their_cards_on_one_pod_network(
    shared_node: SharedNode, namespace: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    node = shared_node.get(NODES)
    names = [m.name for m in node.members]
    for item in Kubectl(node.kubeconfig, None).get("nodes")["items"]:
        member = node.members[names.index(item["metadata"]["name"])]
        status = item["status"]
        assert {"type": "InternalIP", "address": member.ip} in status["addresses"]
        assert status["allocatable"][SPYRE_PF] == str(node_operator.NODE_CARDS)
        ready = [c for c in status["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"
    assert main(["cluster", "status", "--dir", str(node.dir)]) == 0
    shown = capsys.readouterr().out
    assert [f"node: {n}, Ready" in shown for n in names] == [True, True]

    images = {layout.member.name: import_python_image(node, layout) for layout in node.layouts}
    env = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    probe = {"tcpSocket": {"port": PORT}, "periodSeconds": 1}
    servers = [
        pod(
            f"server-{i}",
            images[name],
            SERVE,
            nodeName=name,
            restartPolicy="Always",
            container={"env": env, "readinessProbe": probe},
        )
        for i, name in enumerate(names)
    ]
    for server in servers:
        server["metadata"]["labels"] = {"app": "server"}  # type: ignore[index]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "server"},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": PORT}]},
    }
    apply(namespace, *servers, service)
    ips = []
    for i in range(NODES):
        namespace.wait(f"pod/server-{i}", "condition=Ready")
        ips.append(namespace.get(f"pod/server-{i}")["status"]["podIP"])
    assert ips[0].startswith("10.233.0.") and ips[1].startswith("10.233.1.")
    for ip, name in zip(ips, names, strict=True):  # the host reaches the pods of both
        with urllib.request.urlopen(f"http://{ip}:{PORT}", timeout=10) as answer:
            assert answer.read().decode() == name
    cluster_ip = namespace.get("service/server")["spec"]["clusterIP"]
    # from each node: the other node's pod by its IP, and both through the Service
    # (each node's own kube-proxy)
    clients = [
        pod(
            f"client-{i}",
            images[name],
            FETCH,
            nodeName=name,
            container={"args": [f"http://{ips[1 - i]}:{PORT}", f"http://{cluster_ip}:{PORT}"]},
        )
        for i, name in enumerate(names)
    ]
    apply(namespace, *clients)
    for i, name in enumerate(names):
        namespace.wait(f"pod/client-{i}", "jsonpath={.status.phase}=Succeeded", 120)
        got = json.loads(namespace("logs", f"client-{i}"))
        assert got == {"peer": names[1 - i], "service": sorted(names)}, name


@pytest.fixture
def model(shared_node: SharedNode, models: Path) -> Iterator[Kubectl]:
    """The operator on two nodes, and a 2-replica model spread one per node."""
    node = shared_node.with_operator(nodes=NODES)
    name = f"spread-{uuid.uuid4().hex[:8]}"
    kubectl = node_operator.make_namespace(node, name, models)
    doc = node_operator.tiny_model(NAME)
    doc["spec"]["replicas"] = 2
    doc["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            # a cordoned node is no domain: a drained replica may go to the other node
            "nodeTaintsPolicy": "Honor",
        }
    ]
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    yield kubectl
    for member in node.members:
        Kubectl(node.kubeconfig, None)("uncordon", member.name)
    node_operator.delete_namespace(node, name)


def ready_pods(kubectl: Kubectl) -> dict[str, str] | None:
    """pod -> node of the model's 2 serving pods when both are Ready (and no other)."""
    items = kubectl.get("pods", "-l", MODEL)["items"]
    ready = {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions") or []
        )
    }
    return ready if len(ready) == 2 and len(items) == 2 else None


def drain(kubectl: Kubectl, node_name: str, timeout: str) -> None:
    kubectl(
        "drain", node_name, f"--pod-selector={MODEL}", "--ignore-daemonsets",
        "--delete-emptydir-data", f"--timeout={timeout}", timeout=600,
    )  # fmt: skip


def test_a_drain_moves_a_spread_replica_and_the_budget_keeps_one_serving(
    shared_node: SharedNode, model: Kubectl
) -> None:
    node: Node = shared_node.get(NODES)
    first, second = (m.name for m in node.members)
    placed = poll_until(lambda: ready_pods(model), "2 replicas Ready", WAIT, 2.0)
    assert sorted(placed.values()) == [first, second]  # one on each node
    budget: dict[str, Any] = model.get(f"poddisruptionbudget/{NAME}")
    assert budget["spec"]["maxUnavailable"] == 1
    svc = model.get(f"service/{NAME}")["spec"]
    ready: list[int] = []  # the Deployment's ready replicas, between completions

    def sample() -> None:
        ready.append(model.get(f"deployment/{NAME}")["status"].get("readyReplicas", 0))

    watch = Requests(svc["clusterIP"], svc["ports"][0]["port"], sample)
    watch.start()
    try:
        poll_until(lambda: watch.ok >= 3, "completions through the Service", 120, 0.5)
        drain(model, second, "300s")  # its replica goes to the first node
        moved = poll_until(lambda: ready_pods(model), "2 replicas Ready again", WAIT, 2.0)
        assert list(moved.values()) == [first, first]
        assert set(moved) & set(placed) == {n for n, at in placed.items() if at == first}
        # the second node still cordoned: draining the first evicts one replica, whose
        # replacement has nowhere to go, and the budget refuses the other
        with pytest.raises(KubectlError) as refused:
            drain(model, first, "60s")
        assert "disruption budget" in str(refused.value)
        left = [p for p in model.get("pods", "-l", MODEL)["items"] if p["spec"].get("nodeName")]
        assert len([p for p in left if not p["metadata"].get("deletionTimestamp")]) == 1
        # the second node back first: the waiting replica's only place (and with both
        # back, still its only one: maxSkew 1)
        for name in (second, first):
            model("uncordon", name)
        back = poll_until(lambda: ready_pods(model), "2 replicas Ready, spread", WAIT, 2.0)
        assert sorted(back.values()) == [first, second]
    finally:
        watch.stop()
    print(f"{watch.ok} completions, ready replicas {min(ready)}-{max(ready)}")
    assert watch.failures == []
    assert min(ready) >= 1  # the budget: never more than one replica down
