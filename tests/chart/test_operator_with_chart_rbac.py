"""The real operator, run with exactly the chart's args and as the chart's ServiceAccount
(a real ServiceAccount token from the TokenRequest API, not admin), takes a SpyreModel to
Ready on the real control plane, and the Argo CD health check then says Healthy.

The control plane has no kubelet and no Job/Deployment controllers: the test plays them
with spyre_devcluster.simulate (as admin, the way the cluster would).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import (
    ROOT,
    Installed,
    Kubectl,
    install_rbac,
    run_health_check,
    service_account_kubeconfig,
)
from test_rbac import WEBHOOK_CALLS

from auditlib import AuditLog, load_record, summarize
from spyre_devcluster import simulate
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.operator_process import OperatorProcess
from spyre_devcluster.simulate import poll_until
from spyre_operator.kube.client import Kube, load_api_client
from spyre_operator.render import meta

pytestmark = pytest.mark.chart

WEBHOOK_RESOURCES = {c.resource for c in WEBHOOK_CALLS}

EXAMPLE = ROOT / "examples" / "micro-granite-cpu.yaml"
STEP_TIMEOUT = 180.0  # seconds per step; a loaded 2-core machine is slow, never flaky
# What kopf or the operator log when the API server refuses them.
REFUSALS = ("Forbidden", "forbidden", "Not enough permissions")


def local_args(chart_args: list[str], health: int, metrics: int, webhook: int) -> list[str]:
    """The chart's args, with the pod's ports moved to free loopback ports (and the
    webhook's certificate made for 127.0.0.1, where the API server reaches it here)."""
    out = []
    for arg in chart_args:
        if arg.startswith("--liveness="):
            arg = f"--liveness=http://127.0.0.1:{health}/healthz"
        elif arg.startswith("--metrics-port="):
            arg = f"--metrics-port={metrics}"
        elif arg.startswith("--webhook-port="):
            arg = f"--webhook-port={webhook}"
        elif arg.startswith("--webhook-host="):
            arg = "--webhook-host=127.0.0.1"
        out.append(arg)
    return out


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def webhook_port() -> int:
    return free_port()


@pytest.fixture(params=["namespaced", "cluster"])
def installed(
    request: pytest.FixtureRequest,
    kubectl: Kubectl,
    namespace: str,
    make_namespace: Callable[[], str],
    spyremodel_crd: str,
    webhook_port: int,
) -> Iterator[Installed]:
    """The chart's ServiceAccount + RBAC and its webhook's Secret and configuration (which
    calls the operator on this host); namespaced mode watches one fresh namespace, labelled
    as Kubernetes 1.21+ labels every namespace (the chart's webhook selects by it)."""
    values: dict[str, Any] = {"rbac.mode": request.param}
    if request.param == "namespaced":
        watched = make_namespace()
        kubectl("label", "namespace", watched, f"kubernetes.io/metadata.name={watched}")
        values["watchNamespaces"] = [watched]
    url = f"https://127.0.0.1:{webhook_port}/spyremodels"
    yield from install_rbac(kubectl, namespace, values, webhook_url=url)


def test_operator_reaches_ready_as_the_chart_service_account(
    audit_log: Path,
    installed: Installed,
    kubectl: Kubectl,
    kubeconfig: Path,
    make_namespace: Callable[[], str],
    tmp_path: Path,
    webhook_port: int,
) -> None:
    models_ns = installed.watched[0] if installed.watched else make_namespace()
    health, metrics = free_port(), free_port()
    operator_kubeconfig = service_account_kubeconfig(
        kubectl, kubeconfig, installed.namespace, installed.service_account,
        tmp_path / "operator.kubeconfig",
    )  # fmt: skip
    whoami = Kube(load_api_client(str(operator_kubeconfig)))
    with pytest.raises(Exception, match="403"):  # the token really is the ServiceAccount
        whoami.request("GET", f"/api/v1/namespaces/{models_ns}/secrets")
    audit = AuditLog(audit_log, installed.user)
    operator = OperatorProcess(
        local_args(installed.operator_args, health, metrics, webhook_port),
        operator_kubeconfig,
        tmp_path / "operator.log",
    )
    admin = Kube(load_api_client(str(kubeconfig)))
    try:

        def alive() -> bool:
            operator.check_alive()
            return http_get(f"http://127.0.0.1:{health}/healthz")[0] == 200

        poll_until(alive, "the operator's liveness endpoint", STEP_TIMEOUT)
        doc = yaml.safe_load(EXAMPLE.read_text())
        doc["metadata"]["namespace"] = models_ns
        name = doc["metadata"]["name"]

        # The webhook, with its certificate kept by the chart's RBAC (its Secret and the
        # configuration's caBundle), refuses an invalid SpyreModel with the validator's text.
        bad = {**doc, "spec": {**doc["spec"], "extraArgs": ["--max-model-len=512"]}}

        def refused(*args: str) -> str:
            operator.check_alive()
            result = kubectl("apply", *args, "-f", "-", input=yaml.safe_dump(bad), check=False)
            return result.stderr if "denied the request" in result.stderr else ""

        # (a dry run while waiting: failurePolicy Ignore admits it until the webhook serves)
        poll_until(lambda: refused("--dry-run=server"), "the webhook serves", STEP_TIMEOUT)
        text = refused()
        assert "spec.extraArgs[0]: '--max-model-len=...' sets --max-model-len" in text
        kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))

        def status() -> dict[str, Any]:
            operator.check_alive()
            body = admin.get("SpyreModel", models_ns, name) or {}
            found: dict[str, Any] = body.get("status") or {}
            return found

        poll_until(lambda: bool(status().get("weights")), "the weights Job", STEP_TIMEOUT)
        weights = status()["weights"]
        simulate.complete_weights_job(admin, models_ns, weights["jobName"], weights["revision"])
        poll_until(lambda: bool(status().get("targetCacheKey")), "the compile Job", STEP_TIMEOUT)
        job = meta.compile_job_name(status()["targetCacheKey"])
        assert admin.get("Job", models_ns, job) is not None
        claim = doc["spec"].get("cache", {}).get("volume", {}).get("claimName", "spyre-graph-cache")
        assert admin.get("PersistentVolumeClaim", models_ns, claim) is not None
        simulate.complete_job(admin, models_ns, job)
        poll_until(lambda: admin.get("Deployment", models_ns, name) is not None,
                 "the serving Deployment", STEP_TIMEOUT)  # fmt: skip
        simulate.make_deployment_available(admin, models_ns, name)
        poll_until(lambda: status().get("phase") == "Ready", "phase Ready", STEP_TIMEOUT)

        body = admin.get("SpyreModel", models_ns, name)
        assert body is not None
        assert body["status"]["observedGeneration"] == body["metadata"]["generation"]
        assert admin.get("Service", models_ns, name) is not None
        assert run_health_check(body)["status"] == "Healthy"
        code, text = http_get(f"http://127.0.0.1:{metrics}/metrics")
        assert code == 200 and "spyre_operator_reconciles_total" in text, text
        events = admin.request("GET", f"/api/v1/namespaces/{models_ns}/events")["items"]
        assert any(e["involvedObject"].get("name") == name for e in events), events

        # Deleting works too (no finalizer to wait for; the garbage collector takes the rest).
        kubectl("delete", "spyremodel", name, "-n", models_ns, "--timeout=180s")
        assert admin.get("SpyreModel", models_ns, name) is None
    finally:
        operator.stop()
    log = operator.output()
    refusals = [line for line in log.splitlines() if any(r in line for r in REFUSALS)]
    assert not refusals, "\n".join(refusals)
    # What the API server saw: nothing refused, the webhook's calls exactly those the chart
    # grants it, every other call one the integration tier recorded.
    made, forbidden = summarize(audit.read())
    assert not forbidden, forbidden
    calls = made.namespaced | made.cluster
    assert {c for c in calls if c.resource in WEBHOOK_RESOURCES} == set(WEBHOOK_CALLS)
    recorded = load_record()  # (in cluster mode, the namespaced calls across namespaces)
    known = recorded.namespaced | recorded.cluster | set(WEBHOOK_CALLS)
    assert not made.namespaced - recorded.namespaced - set(WEBHOOK_CALLS)
    assert not made.cluster - known, made.cluster - known
