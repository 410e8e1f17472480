"""A real Prometheus (Debian's `prometheus` binary) for the node tests, and the scrape
configuration the chart's PodMonitor and ServiceMonitor stand for, written the way the
Prometheus Operator renders them (its pkg/prometheus/promcfg.go: one job per endpoint,
Kubernetes service discovery, the selector and port as `keep` relabelings, then the
namespace, pod, container, job and endpoint target labels, then the monitor's own
relabelings). Built from the rendered chart objects, so a change in the chart is what
Prometheus scrapes here.

Debian builds Prometheus without its Kubernetes service discovery (the Kubernetes client
is left out), so `KubernetesTargets` stands in for it: the same targets with the same
`__meta_kubernetes_*` labels (roles pod and endpoints, as Prometheus' discovery/kubernetes
makes them), read with kubectl and handed to Prometheus as a file_sd file. The relabelings
above then run in Prometheus unchanged."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster.controlplane import free_port
from spyre_devcluster.kubectl import Kubectl
from spyre_devcluster.simulate import poll_until
from spyre_devcluster.tools import install_prometheus

# The keys of a RelabelConfig in the CRD, and in Prometheus' configuration file.
RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}
# What each kind discovers: its Kubernetes SD role and the meta labels of its selector,
# its port and its pod.
ROLES = {
    "PodMonitor": (
        "pod",
        "__meta_kubernetes_pod_label",
        "__meta_kubernetes_pod_container_port_name",
    ),
    "ServiceMonitor": (
        "endpoints",
        "__meta_kubernetes_service_label",
        "__meta_kubernetes_endpoint_port_name",
    ),
}


def sanitize(name: str) -> str:
    """A Kubernetes label name as Prometheus' Kubernetes SD spells it in a meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabelings(rules: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for rule in rules or []:
        unknown = set(rule) - set(RELABEL_KEYS)
        if unknown:
            raise NotImplementedError(f"relabeling fields not translated: {sorted(unknown)}")
        out.append({RELABEL_KEYS[k]: v for k, v in rule.items()})
    return out


def _namespaces(monitor: dict[str, Any]) -> dict[str, Any]:
    selector = monitor["spec"].get("namespaceSelector") or {}
    if selector.get("any"):
        return {}
    names = selector.get("matchNames") or [monitor["metadata"]["namespace"]]
    return {"namespaces": {"names": names}}


def _selector(monitor: dict[str, Any], meta: str) -> list[dict[str, Any]]:
    selector = monitor["spec"]["selector"]
    if selector.get("matchExpressions"):
        raise NotImplementedError("selector.matchExpressions is not translated")
    return [
        {
            "action": "keep",
            "source_labels": [f"{meta}_{sanitize(k)}", f"{meta}present_{sanitize(k)}"],
            "regex": f"({v});true",
        }
        for k, v in sorted(selector.get("matchLabels", {}).items())
    ]


def scrape_configs(monitor: dict[str, Any], kubeconfig: Path) -> list[dict[str, Any]]:
    """The scrape jobs of one PodMonitor or ServiceMonitor (Kubernetes service discovery
    through the API server of `kubeconfig`)."""
    kind, spec = monitor["kind"], monitor["spec"]
    role, meta, port_label = ROLES[kind]
    endpoints = spec["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    jobs = []
    for index, endpoint in enumerate(endpoints):
        if "port" not in endpoint:
            raise NotImplementedError(f"{kind} endpoint without a named port: {endpoint}")
        port = endpoint["port"]
        relabel: list[dict[str, Any]] = [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
            *_selector(monitor, meta),
            {"action": "keep", "source_labels": [port_label], "regex": port},
        ]
        if kind == "ServiceMonitor":
            for target_kind, label in (("Node", "node"), ("Pod", "pod")):
                relabel.append(
                    {
                        "source_labels": [
                            "__meta_kubernetes_endpoint_address_target_kind",
                            "__meta_kubernetes_endpoint_address_target_name",
                        ],
                        "separator": ";",
                        "regex": f"{target_kind};(.*)",
                        "replacement": "${1}",
                        "target_label": label,
                    }
                )
        relabel.append(
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"}
        )
        if kind == "ServiceMonitor":
            relabel.append(
                {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"}
            )
        relabel += [
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "target_label": "container",
            },
            {
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
            },
        ]
        job_label = spec.get("jobLabel")
        if job_label:
            relabel.append(
                {
                    "source_labels": [f"{meta}_{sanitize(job_label)}"],
                    "target_label": "job",
                    "regex": "(.+)",
                    "replacement": "${1}",
                }
            )
        elif kind == "PodMonitor":
            relabel.append({"target_label": "job", "replacement": f"{namespace}/{name}"})
        else:
            relabel.append(
                {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"}
            )
        relabel.append({"target_label": "endpoint", "replacement": port})
        job = {
            "job_name": f"{kind[0].lower()}{kind[1:]}/{namespace}/{name}/{index}",
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "kubernetes_sd_configs": [
                {"role": role, "kubeconfig_file": str(kubeconfig), **_namespaces(monitor)}
            ],
            "metrics_path": endpoint.get("path", "/metrics"),
            "relabel_configs": relabel + _relabelings(endpoint.get("relabelings")),
            "metric_relabel_configs": _relabelings(endpoint.get("metricRelabelings")),
        }
        if "honorTimestamps" in endpoint:
            job["honor_timestamps"] = endpoint["honorTimestamps"]
        for key, field in (("scrape_interval", "interval"), ("scrape_timeout", "scrapeTimeout")):
            if field in endpoint:
                job[key] = endpoint[field]
        jobs.append(job)
    return jobs


def _present(prefix: str, values: dict[str, str] | None) -> dict[str, str]:
    """A map's entries as Kubernetes SD labels: <prefix>_<name> and <prefix>present_<name>."""
    out = {}
    for key, value in (values or {}).items():
        out[f"{prefix}_{sanitize(key)}"] = value
        out[f"{prefix}present_{sanitize(key)}"] = "true"
    return out


def _pod_labels(pod: dict[str, Any]) -> dict[str, str]:
    """The labels of the pod role that do not depend on the container."""
    meta, status = pod["metadata"], pod.get("status", {})
    ready = next(
        (c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), "unknown"
    )
    labels = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_ip": status.get("podIP", ""),
        "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_uid": meta["uid"],
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_ready": ready.lower(),
        **_present("__meta_kubernetes_pod_label", meta.get("labels")),
        **_present("__meta_kubernetes_pod_annotation", meta.get("annotations")),
    }
    controller = next((o for o in meta.get("ownerReferences", []) if o.get("controller")), None)
    if controller:
        labels["__meta_kubernetes_pod_controller_kind"] = controller["kind"]
        labels["__meta_kubernetes_pod_controller_name"] = controller["name"]
    return labels


def _containers(pod: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    spec = pod["spec"]
    return [(c, False) for c in spec["containers"]] + [
        (c, True) for c in spec.get("initContainers", [])
    ]


def _container_labels(
    container: dict[str, Any], init: bool, port: dict[str, Any] | None
) -> dict[str, str]:
    labels = {
        "__meta_kubernetes_pod_container_name": container["name"],
        "__meta_kubernetes_pod_container_image": container.get("image", ""),
        "__meta_kubernetes_pod_container_init": str(init).lower(),
    }
    if port is not None:
        labels["__meta_kubernetes_pod_container_port_name"] = port.get("name", "")
        labels["__meta_kubernetes_pod_container_port_number"] = str(port["containerPort"])
        labels["__meta_kubernetes_pod_container_port_protocol"] = port.get("protocol", "TCP")
    return labels


class KubernetesTargets:
    """Prometheus' Kubernetes service discovery, roles pod and endpoints, as file_sd target
    groups (see the module's docstring): `files(job)` replaces a job's
    kubernetes_sd_configs, `refresh()` lists the cluster again and rewrites the files."""

    def __init__(self, kubeconfig: Path, folder: Path) -> None:
        self.kubectl = Kubectl(kubeconfig, None)
        self.folder = folder
        self.wanted: dict[Path, dict[str, Any]] = {}  # file -> its kubernetes_sd_config

    def files(self, job: dict[str, Any]) -> dict[str, Any]:
        """The job with file_sd_configs in place of its kubernetes_sd_configs."""
        out = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
        paths = []
        for index, config in enumerate(job["kubernetes_sd_configs"]):
            path = self.folder / f"{sanitize(job['job_name'])}-{index}.json"
            self.wanted[path] = config
            paths.append(str(path))
        return {**out, "file_sd_configs": [{"files": paths, "refresh_interval": "5s"}]}

    def refresh(self) -> None:
        objects = {
            kind: self.kubectl.get(kind, "--all-namespaces")["items"]
            for kind in ("pods", "endpoints", "services")
        }
        for path, config in self.wanted.items():
            names = set(config.get("namespaces", {}).get("names", []))
            scoped = {
                kind: [o for o in items if not names or o["metadata"]["namespace"] in names]
                for kind, items in objects.items()
            }
            groups = (
                self._pods(scoped["pods"]) if config["role"] == "pod" else self._endpoints(scoped)
            )
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(groups))
            tmp.replace(path)  # Prometheus never reads a half-written file

    @staticmethod
    def _pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        groups = []
        for pod in pods:
            ip = pod.get("status", {}).get("podIP")
            if not ip:
                continue
            common = _pod_labels(pod)
            for container, init in _containers(pod):
                for port in container.get("ports") or [None]:
                    address = f"{ip}:{port['containerPort']}" if port else ip
                    labels = {**common, **_container_labels(container, init, port)}
                    groups.append({"targets": [address], "labels": labels})
        return groups

    @staticmethod
    def _endpoints(scoped: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
        def key(o: dict[str, Any]) -> tuple[str, str]:
            return o["metadata"]["namespace"], o["metadata"]["name"]

        services = {key(s): s for s in scoped["services"]}
        pods = {key(p): p for p in scoped["pods"]}
        groups = []
        for endpoints in scoped["endpoints"]:
            namespace, name = key(endpoints)
            common = {
                "__meta_kubernetes_namespace": namespace,
                "__meta_kubernetes_endpoints_name": name,
                **_present(
                    "__meta_kubernetes_endpoints_label", endpoints["metadata"].get("labels")
                ),
            }
            service = services.get((namespace, name))
            if service:
                common["__meta_kubernetes_service_name"] = name
                common |= _present(
                    "__meta_kubernetes_service_label", service["metadata"].get("labels")
                )
                common |= _present(
                    "__meta_kubernetes_service_annotation", service["metadata"].get("annotations")
                )
            for subset in endpoints.get("subsets") or []:
                addresses = [(a, "true") for a in subset.get("addresses") or []]
                addresses += [(a, "false") for a in subset.get("notReadyAddresses") or []]
                for address, ready in addresses:
                    for port in subset.get("ports") or []:
                        labels = {
                            **common,
                            "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                            "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                            "__meta_kubernetes_endpoint_ready": ready,
                        }
                        target = address.get("targetRef") or {}
                        if target:
                            labels["__meta_kubernetes_endpoint_address_target_kind"] = target[
                                "kind"
                            ]
                            labels["__meta_kubernetes_endpoint_address_target_name"] = target[
                                "name"
                            ]
                        pod = (
                            pods.get((namespace, target.get("name", "")))
                            if target.get("kind") == "Pod"
                            else None
                        )
                        if pod is not None:
                            labels |= _pod_labels(pod)
                            for container, init in _containers(pod):
                                for cport in container.get("ports") or []:
                                    if cport["containerPort"] == port["port"]:
                                        labels |= _container_labels(container, init, cport)
                        groups.append(
                            {"targets": [f"{address['ip']}:{port['port']}"], "labels": labels}
                        )
        return groups


class Prometheus:
    """A Prometheus server on 127.0.0.1 with its own data folder, from start() to stop()."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(
        self,
        scrapes: list[dict[str, Any]],
        targets: KubernetesTargets,
        rules: list[dict[str, Any]],
        interval: str,
    ) -> None:
        """Scrape `scrapes` (their Kubernetes targets from `targets`), evaluate the rule
        `groups` every `interval`."""
        (self.folder / "rules.yaml").write_text(yaml.safe_dump({"groups": rules}))
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [targets.files(job) for job in scrapes],
        }
        targets.refresh()
        (self.folder / "prometheus.yaml").write_text(yaml.safe_dump(config))
        log = (self.folder / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [install_prometheus(), f"--config.file={self.folder / 'prometheus.yaml'}",
             f"--storage.tsdb.path={self.folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
        )  # fmt: skip
        poll_until(self._ready, f"Prometheus ready ({self.folder / 'prometheus.log'})", 60, 0.5)

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"Prometheus exited: {self.log()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def log(self) -> str:
        return (self.folder / "prometheus.log").read_text(errors="replace")

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

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
