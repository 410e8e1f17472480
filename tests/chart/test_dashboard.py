"""The chart's Grafana dashboard: a ConfigMap only when asked for, with the label Grafana's
sidecar loads, and PromQL Prometheus parses in every panel (that each returns series is
tested against a real Prometheus on the node: tests/node/test_node_monitoring.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import find, render

from spyre_devcluster.tools import install_promtool

pytestmark = pytest.mark.chart

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _dashboard(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = render("ops", {"monitoring.dashboard.enabled": True, **values})
    (configmap,) = [
        d for d in find(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")
    ]
    (text,) = configmap["data"].values()
    return configmap, json.loads(text)


def test_no_dashboard_by_default() -> None:
    assert not [d for d in find(render("ops"), "ConfigMap") if "dashboard" in d["metadata"]["name"]]


def test_the_dashboard_carries_the_sidecars_label_and_the_given_ones() -> None:
    configmap, dashboard = _dashboard(
        {"monitoring.dashboard.annotations": {"grafana_folder": "Spyre"}}
    )
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Spyre"}
    assert dashboard["uid"] == "spyre-serving"
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"]) == ("datasource", "datasource")


def test_every_panel_reads_the_chosen_prometheus_with_valid_promql(tmp_path: Path) -> None:
    _, dashboard = _dashboard({})
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"] == DATASOURCE and p["targets"] for p in panels)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), ids
    # promtool parses each query as a recording rule's expression
    rules = [
        {"record": f"panel_{p['id']}_{t['refId']}", "expr": t["expr"]}
        for p in panels
        for t in p["targets"]
    ]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    done = subprocess.run(
        [install_promtool(), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
