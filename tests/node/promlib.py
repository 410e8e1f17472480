"""A real Prometheus (Debian's `prometheus` binary) for the node tests, and the scrape
configuration the chart's PodMonitor and ServiceMonitor stand for, written the way the
Prometheus Operator renders them (its pkg/prometheus/promcfg.go: one job per endpoint,
Kubernetes service discovery, the selector and port as `keep` relabelings, then the
namespace, pod, container, job and endpoint target labels, then the monitor's own
relabelings). Built from the rendered chart objects, so a change in the chart is what
Prometheus scrapes here."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from spyre_operator.local.controlplane import free_port
from spyre_operator.local.simulate import poll_until
from spyre_operator.local.tools import install_prometheus

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
    """The scrape jobs of one PodMonitor or ServiceMonitor, discovering through the
    API server of `kubeconfig`."""
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


class Prometheus:
    """A Prometheus server on 127.0.0.1 with its own data folder, from start() to stop()."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(
        self, scrapes: list[dict[str, Any]], rules: list[dict[str, Any]], interval: str
    ) -> None:
        """Scrape `scrapes`, evaluate the rule `groups` every `interval`."""
        (self.folder / "rules.yaml").write_text(yaml.safe_dump({"groups": rules}))
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": ["rules.yaml"],
            "scrape_configs": scrapes,
        }
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
