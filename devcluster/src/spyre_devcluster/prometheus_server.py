"""A Prometheus run by the Prometheus Operator on the node (prometheus_operator.py): the
objects a user writes for one (the Prometheus, its ServiceAccount and read access to the
cluster's targets), and its HTTP API at its pod's address.

Two configurations: plain (each monitor's honorLabels and namespaceSelector as written), and
User-Workload-Monitoring-like: what OpenShift's cluster-monitoring-operator sets on the
Prometheus of User Workload Monitoring (`enforcedNamespaceLabel: namespace`,
`overrideHonorLabels`, `ignoreNamespaceSelectors`): every series and alert of a monitor or
rule carries the namespace of the object, whatever the target says, and a monitor
scrapes its own namespace only.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spyre_devcluster.kubectl import Kubectl, KubectlError
from spyre_devcluster.simulate import poll_until

PORT = 9090  # Prometheus' port in the pods the operator renders ("web")
READY = 300  # the images imported, a pod starts in seconds; a loaded machine is slow
USER_WORKLOAD = {
    "enforcedNamespaceLabel": "namespace",
    "overrideHonorLabels": True,
    "ignoreNamespaceSelectors": True,
}
# What Prometheus' Kubernetes discovery reads (the operator's documented RBAC)
READS = [
    {"apiGroups": [""], "resources": ["nodes", "services", "endpoints", "pods"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
]  # fmt: skip


def prometheus_objects(
    name: str, namespace: str, image: str, version: str, user_workload: bool
) -> list[dict[str, Any]]:
    """The namespace, ServiceAccount, ClusterRole and binding, and the Prometheus: every
    PodMonitor, ServiceMonitor and PrometheusRule of every namespace, every 5 s."""
    everything: dict[str, Any] = {}
    spec = {
        "image": image,
        "version": version,
        "imagePullPolicy": "Never",  # imported into the node's containerd
        "replicas": 1,
        "serviceAccountName": name,
        "scrapeInterval": "5s",
        "evaluationInterval": "5s",
        "resources": {"requests": {"cpu": "50m", "memory": "100Mi"}},
    } | {
        f"{kind}{part}": everything
        for kind in ("podMonitor", "serviceMonitor", "rule")
        for part in ("Selector", "NamespaceSelector")
    }
    if user_workload:
        spec |= USER_WORKLOAD
    role = f"{namespace}-{name}"
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role}, "rules": READS},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": role}, "subjects": [subject],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": role}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
         "metadata": {"name": name, "namespace": namespace}, "spec": spec},
    ]  # fmt: skip


class PrometheusServer:
    """The Prometheus of a Prometheus object: its pod (`prometheus-<name>-0`, the
    StatefulSet the operator renders) and its HTTP API at `url`."""

    def __init__(
        self, kubeconfig: Path, namespace: str, name: str, objects: list[dict[str, Any]]
    ) -> None:
        self.kubectl = Kubectl(kubeconfig, namespace)
        self.name = name
        self.pod = f"prometheus-{name}-0"
        self.objects = objects
        self.url = ""

    def wait_ready(self, check: Callable[[], None]) -> None:
        """Until the pod is Ready (its readiness probe is Prometheus' /-/ready); `check`
        raises when what renders the pod has died."""

        def ready() -> bool:
            check()
            try:
                status = self.kubectl.get("pod", self.pod).get("status", {})
            except KubectlError:  # not made yet
                return False
            conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
            if conditions.get("Ready") != "True":
                return False
            self.url = f"http://{status['podIP']}:{PORT}"
            return True

        poll_until(ready, f"Prometheus {self.pod} ready", READY, interval=2.0)

    def describe(self) -> str:
        try:
            return self.kubectl("describe", "prometheus,statefulset,pod")
        except KubectlError as error:
            return str(error)

    def delete(self) -> None:
        """The objects again (the namespace stays: others may share it)."""
        for doc in reversed(self.objects):
            if doc["kind"] != "Namespace":
                kind, name = doc["kind"].lower(), doc["metadata"]["name"]
                self.kubectl("delete", f"{kind}/{name}", "--ignore-not-found", "--wait=false")

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=30) as resp:
            answer = json.loads(resp.read())
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar as one sample) `expr` gives now."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = (
            data["result"] if data["resultType"] == "vector" else [{"value": data["result"]}]
        )
        return result

    def alerts(self, state: str = "firing") -> list[dict[str, Any]]:
        return [a for a in self.api("alerts")["alerts"] if a["state"] == state]

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return active

    def config(self) -> str:
        """The configuration Prometheus loaded (the operator's rendering)."""
        return str(self.api("status/config")["yaml"])
