"""The operator's /metrics as Prometheus reads it: promtool accepts the exposition, and the
families an alert needs are there (phase per model, reconcile latency, compile time,
errors by reason), and those of the dashboard (a compiled key's bytes on its volume)."""

from __future__ import annotations

import subprocess

import cluster_sim as sim
import pytest

from spyre_devcluster.tools import install_promtool
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration


def test_metrics_pass_promtool_and_count_phases_and_compiles(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    sim.to_ready(kube, sim.model(namespace, "good"))
    sim.create(
        kube, sim.model(namespace, "bad", sim.example(env=[{"name": "VLLM_PLUGINS", "value": "x"}]))
    )
    sim.wait_phase(kube, namespace, "bad", "Invalid")
    ns = f'namespace="{namespace}"'
    got = sim.wait_for(
        lambda: m if (m := operator.metrics()).get(f'spyre_operator_model_phase{{{ns},'
                                                   'name="bad",phase="Invalid"}') else None,
        "the Invalid model in the metrics",
    )  # fmt: skip
    assert got[f'spyre_operator_model_phase{{{ns},name="good",phase="Ready"}}'] == 1
    assert got['spyre_operator_models{phase="Ready"}'] == 1
    assert got['spyre_operator_models{phase="Invalid"}'] == 1
    assert got["spyre_operator_compile_duration_seconds_count"] == 1
    assert got["spyre_operator_compile_duration_seconds_sum"] == 42.0  # the simulated summary
    assert (
        got['spyre_operator_reconcile_duration_seconds_bucket{le="+Inf"}']
        == (got["spyre_operator_reconcile_duration_seconds_count"])
        > 0
    )
    # the key's inventory entry (a SpyreCache) reports the compile's bytes, once per key
    sizes = sim.wait_for(
        lambda: [v for k, v in operator.metrics().items()
                 if k.startswith(f"spyre_operator_cache_key_bytes{{{ns},")] or None,
        "the compiled key's bytes in the metrics",
    )  # fmt: skip
    assert sizes == [3 * 2**30]  # the simulated summary
    assert any(
        k.startswith(f'spyre_operator_cache_key_bytes{{{ns},claim="spyre-graph-cache",key="')
        for k in operator.metrics()
    )
    assert got[f"spyre_operator_compile_queue_keys{{{ns}}}"] == 0
    checked = subprocess.run(
        [install_promtool(), "check", "metrics"],
        input=operator.metrics_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
