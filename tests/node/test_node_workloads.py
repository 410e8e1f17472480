"""Pods really run on the node: a local image, shared storage of the default class, and a
ClusterIP Service answered through kube-proxy, and a cluster IP without one refused."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request

import pytest
from nodelib import Kubectl, apply, pod

from spyre_devcluster.node import Node
from spyre_devcluster.node_config import NODE_NAME, STORAGE_CLASS
from spyre_devcluster.simulate import poll_until

pytestmark = pytest.mark.node


def test_the_node_is_ready_and_status_shows_it(node: Node, kubectl: Kubectl) -> None:
    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    assert [n["metadata"]["name"] for n in nodes] == [NODE_NAME]
    ready = {c["type"]: c["status"] for c in nodes[0]["status"]["conditions"]}["Ready"]
    assert ready == "True"
    status = subprocess.run(
        [sys.executable, "-m", "spyre_operator", "cluster", "status", "--dir", str(node.dir)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"node: {NODE_NAME}, Ready" in status
    assert "kubelet: pid" in status


def test_a_pod_from_a_locally_imported_image_runs(kubectl: Kubectl, python_image: str) -> None:
    apply(
        kubectl, pod("hello", python_image, "import os; print('hello from', os.uname().nodename)")
    )
    kubectl.wait("pod/hello", "jsonpath={.status.phase}=Succeeded")
    assert kubectl("logs", "hello").strip() == "hello from hello"


def test_the_default_class_binds_rwx_and_two_pods_share_it(
    kubectl: Kubectl, python_image: str
) -> None:
    claims = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Mi"}}},
        }
        for name, mode in (("shared", "ReadWriteMany"), ("single", "ReadWriteOnce"))
    ]
    apply(kubectl, *claims)
    kubectl.wait("pvc/shared", "jsonpath={.status.phase}=Bound")
    kubectl.wait("pvc/single", "jsonpath={.status.phase}=Bound")
    assert kubectl("get", "pvc/shared", "-o", "jsonpath={.spec.storageClassName}") == STORAGE_CLASS
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}
    mount = {"container": {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}}
    as_user = {"securityContext": {"runAsUser": 2000}}  # a non-root pod may write too
    apply(
        kubectl,
        pod("writer", python_image, "open('/data/note','w').write('shared')",
            volumes=[volume], **mount, **as_user),
    )  # fmt: skip
    kubectl.wait("pod/writer", "jsonpath={.status.phase}=Succeeded")
    apply(
        kubectl,
        pod("reader", python_image, "print(open('/data/note').read())", volumes=[volume], **mount),
    )
    kubectl.wait("pod/reader", "jsonpath={.status.phase}=Succeeded")
    assert kubectl("logs", "reader").strip() == "shared"


def test_a_cluster_ip_service_answers_through_kube_proxy(
    kubectl: Kubectl, python_image: str
) -> None:
    server = pod(
        "web",
        python_image,
        "import http.server as h; h.ThreadingHTTPServer(('', 8080), type('H', "
        "(h.BaseHTTPRequestHandler,), {'do_GET': lambda s: (s.send_response(200), "
        "s.end_headers(), s.wfile.write(b'answered'))})).serve_forever()",
        container={"readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}},
        restartPolicy="Always",
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    apply(kubectl, server, service)
    kubectl.wait("pod/web", "condition=Ready")
    ip = kubectl("get", "svc/web", "-o", "jsonpath={.spec.clusterIP}")
    # kube-proxy programs the rules a moment after the endpoint turns ready

    def answer() -> bytes | None:
        try:
            with urllib.request.urlopen(f"http://{ip}:80/", timeout=5) as resp:
                body: bytes = resp.read()
                return body
        except OSError:
            return None

    assert poll_until(answer, f"the Service's cluster IP {ip} answers", 60, 0.5) == b"answered"


def test_a_cluster_ip_without_a_service_refuses_the_connection(
    kubectl: Kubectl, python_image: str
) -> None:
    """Traffic to a cluster IP kube-proxy has not routed never leaves the node: refused at
    once, from the host (the API server's calls to aggregated APIs and webhooks) and from a
    pod. Where the machine's own network answered it instead, the API server kept such a
    connection and its calls never reached the Service once routed."""
    unused = "10.111.255.254"  # inside the Service range
    taken = kubectl("get", "svc", "-A", "-o", "jsonpath={.items[*].spec.clusterIP}").split()
    assert unused not in taken
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((unused, 443), timeout=10)
    script = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('{unused}', 443), timeout=10)\n"
        "except ConnectionRefusedError:\n"
        "    print('refused')\n"
    )
    apply(kubectl, pod("probe", python_image, script))
    kubectl.wait("pod/probe", "jsonpath={.status.phase}=Succeeded")
    assert kubectl("logs", "probe").strip() == "refused"
