"""The chart's PrometheusRule: `promtool check rules` accepts it and `promtool test rules`
shows each alert firing when documented, and not before (tests/chart/prometheus_rules_test.yaml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from chartlib import find, render, template

from spyre_devcluster.tools import install_promtool
from spyre_operator.controller.triggers import CATCH_UP

pytestmark = pytest.mark.chart

UNIT_TESTS = Path(__file__).parent / "prometheus_rules_test.yaml"


def _rules(folder: Path) -> Path:
    docs = render("ops", {"monitoring.rules": {"enabled": True}})
    (rule,) = find(docs, "PrometheusRule")
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def promtool(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [install_promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    out = promtool("check", "rules", str(_rules(tmp_path)), cwd=tmp_path)
    assert "SUCCESS: 9 rules found" in out


def test_alerts_fire_when_documented(tmp_path: Path) -> None:
    _rules(tmp_path)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    out = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert "SUCCESS" in out


def test_the_resync_alert_fires_when_the_operator_warns() -> None:
    """SpyreOperatorResyncOverrun's bound is the one past which the operator logs that a
    pass took longer than its period: the period plus CATCH_UP."""
    docs = render("ops", {"monitoring.rules": {"enabled": True}, "operator.resyncSeconds": 120})
    (rule,) = find(docs, "PrometheusRule")
    (alert,) = [r for r in rule["spec"]["groups"][0]["rules"] if r["alert"].endswith("Overrun")]
    assert alert["expr"].endswith(f"> {120 + CATCH_UP:g}"), alert["expr"]


def test_rules_need_the_metrics() -> None:
    result = template("ops", {"monitoring.rules": {"enabled": True}, "metrics.enabled": False})
    assert result.returncode != 0 and "needs metrics.enabled=true" in result.stderr
