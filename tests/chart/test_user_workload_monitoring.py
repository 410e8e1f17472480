"""monitoring.userWorkload: the monitors and alerts for OpenShift's User Workload Monitoring,
which puts each monitor's own namespace in every series' `namespace`, ignores honorLabels
and ignores namespaceSelector. The model alerts name the model's namespace from
`model_namespace` (promtool, on series labelled as UWM stores them:
prometheus_rules_uwm_test.yaml), and a serving monitor sits in each model namespace."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import find, render, template
from test_prometheus_rules import promtool

pytestmark = pytest.mark.chart

UNIT_TESTS = Path(__file__).parent / "prometheus_rules_uwm_test.yaml"
UWM = {"monitoring.userWorkload": True}
MODEL_ALERTS = ("SpyreModelFailed", "SpyreModelDegraded", "SpyreModelNotReady",
                "SpyreModelCompileTooLong")  # fmt: skip


def rules(values: dict[str, Any]) -> list[dict[str, Any]]:
    docs = render("ops", {**values, "monitoring.rules": {"enabled": True}})
    (rule,) = find(docs, "PrometheusRule")
    found: list[dict[str, Any]] = rule["spec"]["groups"][0]["rules"]
    return found


def operator_endpoint(values: dict[str, Any]) -> dict[str, Any]:
    docs = render("ops", {**values, "monitoring.operator": {"enabled": True}})
    (monitor,) = find(docs, "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return dict(endpoint)


def test_the_operator_monitor_keeps_the_models_namespace_in_model_namespace() -> None:
    endpoint = operator_endpoint(UWM)
    assert "honorLabels" not in endpoint  # UWM overrides it; nothing may rely on it
    copy, drop = endpoint["metricRelabelings"]
    assert copy == {"sourceLabels": ["exported_namespace"], "regex": "(.+)",
                    "targetLabel": "model_namespace"}  # fmt: skip
    assert drop == {"regex": "exported_namespace", "action": "labeldrop"}
    plain = operator_endpoint({})
    assert plain["honorLabels"] is True and "metricRelabelings" not in plain


def test_the_model_alerts_group_by_model_namespace_and_the_volume_alert_goes() -> None:
    by_name = {r["alert"]: r for r in rules(UWM)}
    for name in MODEL_ALERTS:
        assert by_name[name]["expr"].startswith("max by (model_namespace, name) ")
        assert "$labels.model_namespace" in by_name[name]["annotations"]["summary"]
    assert "SpyreCacheVolumeFillingUp" not in by_name
    plain = {r["alert"]: r for r in rules({})}
    assert plain["SpyreModelFailed"]["expr"].startswith("max by (namespace, name) ")
    assert set(plain) - set(by_name) == {"SpyreCacheVolumeFillingUp"}


def test_alerts_fire_with_the_models_own_namespace_under_uwm_labels(tmp_path: Path) -> None:
    docs = render("ops", {**UWM, "monitoring.rules": {"enabled": True}})
    (rule,) = find(docs, "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    assert "SUCCESS: 8 rules found" in promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    assert "SUCCESS" in promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)


def serving_monitors(values: dict[str, Any]) -> list[dict[str, Any]]:
    docs = render("ops", {**values, "monitoring.serving.enabled": True})
    return find(docs, "PodMonitor")


@pytest.mark.parametrize(
    ("values", "homes"),
    [
        ({"monitoring.serving.namespaces": ["team-a", "team-b"]}, ["team-a", "team-b"]),
        ({"rbac.mode": "namespaced", "watchNamespaces": ["llm"]}, ["llm"]),
    ],
)
def test_a_serving_monitor_in_each_model_namespace(
    values: dict[str, Any], homes: list[str]
) -> None:
    monitors = serving_monitors({**UWM, **values})
    assert [m["metadata"]["namespace"] for m in monitors] == homes
    for monitor in monitors:
        own = monitor["metadata"]["namespace"]
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [own]}
    (plain,) = serving_monitors({})
    assert plain["metadata"]["namespace"] == "ops"
    assert plain["spec"]["namespaceSelector"] == {"any": True}


def test_uwm_serving_monitors_need_the_model_namespaces() -> None:
    values = {**UWM, "monitoring.serving.enabled": True}
    result = template("ops", values)
    assert result.returncode != 0
    assert "monitoring.serving.namespaces: with monitoring.userWorkload" in result.stderr
