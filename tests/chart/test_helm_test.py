"""`helm test` and the chart's metadata.

The test pod runs `spyre-operator check-install` from the operator's image; here its exact
args run on the real control plane, as its ServiceAccount (a real token, the chart's Role),
against the real operator's health endpoint (the kubelet's part, a Running operator pod
with an IP, is played). Chart.yaml carries what Artifact Hub and `helm lint --strict` want,
in step with crds/, examples/ and the image.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import (
    CHART,
    RELEASE,
    ROOT,
    Kubectl,
    find,
    helm,
    render,
    service_account_kubeconfig,
)

from spyre_devcluster import simulate
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.operator_process import OperatorProcess
from spyre_operator.api.crd import build_cache_crd, build_crd
from spyre_operator.api.validation import validate
from spyre_operator.cli import build_parser
from spyre_operator.kube.client import Kube, load_api_client

pytestmark = pytest.mark.chart

CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
HOOK = "helm.sh/hook"


def _test_objects(namespace: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = render(namespace, values, tests=True)
    return [d for d in docs if d["metadata"].get("annotations", {}).get(HOOK) == "test"]


def test_the_test_pod_checks_the_operator_with_its_own_image_and_security() -> None:
    docs = render("ops", tests=True)
    (deploy,) = find(docs, "Deployment")
    operator_pod = deploy["spec"]["template"]
    (pod,) = find(_test_objects("ops"), "Pod")
    spec = pod["spec"]
    (container,) = spec["containers"]
    (operator,) = operator_pod["spec"]["containers"]
    assert container["image"] == operator["image"]  # no other image to pull
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"] == operator_pod["spec"]["securityContext"]
    assert container["securityContext"] == operator["securityContext"]
    args = build_parser().parse_args(container["args"])
    assert (container["command"], args.command) == (["spyre-operator"], "check-install")
    assert args.namespace == "ops"
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    assert operator["livenessProbe"]["httpGet"]["port"] == "health"
    assert args.port == ports["health"]
    # It selects the operator's pods, and is not one of them.
    selected = dict(pair.split("=") for pair in args.selector.split(","))
    assert selected == deploy["spec"]["selector"]["matchLabels"]
    assert not selected.items() <= pod["metadata"]["labels"].items()
    assert selected.items() <= operator_pod["metadata"]["labels"].items()


def test_the_test_objects_are_hooks_with_a_read_only_role() -> None:
    objects = _test_objects("ops")
    assert sorted(d["kind"] for d in objects) == ["Pod", "Role", "RoleBinding", "ServiceAccount"]
    for obj in objects:
        notes = obj["metadata"]["annotations"]
        assert notes["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # the account and its rights exist before the pod starts
        assert int(notes.get("helm.sh/hook-weight", "0")) < 0 or obj["kind"] == "Pod"
    (role,) = find(objects, "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {
            "apiGroups": ["serving.spyre.dev"],
            "resources": ["spyremodels", "spyrecaches"],
            "verbs": ["list"],
        },
    ]
    (pod,) = find(objects, "Pod")
    (account,) = find(objects, "ServiceAccount")
    assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
    # plain `helm template --skip-tests` (and the other chart tests) leave them out
    assert not [d for d in render("ops") if HOOK in d["metadata"].get("annotations", {})]


def test_helm_lint_strict_has_no_remark() -> None:
    result = helm("lint", "--strict", str(CHART))
    remarks = [ln for ln in result.stdout.splitlines() if ln.startswith("[")]
    assert not remarks, result.stdout


def _annotation(key: str) -> Any:
    return yaml.safe_load(CHART_YAML["annotations"][f"artifacthub.io/{key}"])


def test_chart_yaml_has_what_artifact_hub_shows() -> None:
    assert CHART_YAML["home"] and CHART_YAML["sources"] and CHART_YAML["maintainers"]
    icon = CHART_YAML["icon"]
    assert icon.endswith("/main/docs/images/icon.svg") and (ROOT / "docs/images/icon.svg").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    license_id = CHART_YAML["annotations"]["artifacthub.io/license"]
    assert f'license = {{ text = "{license_id}" }}' in pyproject
    assert CHART_YAML["annotations"]["artifacthub.io/operator"] == "true"
    assert _annotation("crds") == [
        {
            "kind": crd["spec"]["names"]["kind"],
            "version": crd["spec"]["versions"][0]["name"],
            "name": crd["metadata"]["name"],
            "displayName": crd["spec"]["names"]["kind"],
            "description": crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"],
        }
        for crd in (build_crd(), build_cache_crd())
    ]
    (example,) = _annotation("crdsExamples")
    assert example == yaml.safe_load((ROOT / "examples/micro-granite-cpu.yaml").read_text())
    assert validate(example) == []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    (image,) = _annotation("images")
    assert image["image"] == f"{values['image']['repository']}:{CHART_YAML['appVersion']}"


# ---- the check itself, on the real control plane --------------------------------------


@pytest.fixture
def operator_health(
    namespace: str, kubeconfig: Path, spyremodel_crd: str, tmp_path: Path
) -> Iterator[int]:
    """The real operator's health endpoint on a loopback port, watching the namespace."""
    port = free_port()
    args = ["run", "--namespace", namespace, f"--liveness=http://127.0.0.1:{port}/healthz"]
    operator = OperatorProcess(args, kubeconfig, tmp_path / "operator.log")
    try:
        yield port
    finally:
        operator.stop()


def _check(args: list[str], port: int, kubeconfig: Path, timeout: str) -> tuple[int, str]:
    """The test pod's command, its health port moved to where the local operator listens."""
    local = [f"--port={port}" if a.startswith("--port=") else a for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "spyre_operator", *local,
         "--kubeconfig", str(kubeconfig), "--timeout", timeout],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_check_install_passes_as_the_test_account_and_fails_when_the_operator_is_gone(
    namespace: str,
    kubeconfig: Path,
    kubectl: Kubectl,
    operator_health: int,
    tmp_path: Path,
) -> None:
    objects = _test_objects(namespace)
    rbac = [d for d in objects if d["kind"] != "Pod"]
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    (test_pod,) = find(objects, "Pod")
    account = test_pod["spec"]["serviceAccountName"]
    as_test_pod = service_account_kubeconfig(
        kubectl, kubeconfig, namespace, account, tmp_path / "test.kubeconfig"
    )
    # The operator's pod as the kubelet reports it: Running, at the loopback address.
    (deploy,) = find(render(namespace, release=RELEASE), "Deployment")
    admin = Kube(load_api_client(str(kubeconfig)))
    simulate.ensure_service_account(admin, namespace)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator-0", "namespace": namespace,
                     "labels": deploy["spec"]["template"]["metadata"]["labels"]},
        "spec": {"containers": [{"name": "operator", "image": "operator"}],
                 "automountServiceAccountToken": False},
    }  # fmt: skip
    admin.create(pod)
    status = {"status": {"phase": "Running", "podIP": "127.0.0.1"}}
    admin.patch("Pod", namespace, "operator-0", status, sub="status")

    args = test_pod["spec"]["containers"][0]["args"]
    # (the check waits for the operator, which may still be starting)
    code, out = _check(args, operator_health, as_test_pod, "120")
    assert code == 0, out
    assert out.splitlines() == [
        f"ok: the operator pod operator-0 answers on http://127.0.0.1:{operator_health}/healthz",
        "ok: the API server serves spyremodels and spyrecaches.serving.spyre.dev/v1alpha1",
    ]

    gone = free_port()  # nothing listens there
    code, out = _check(args, gone, as_test_pod, "3")
    assert code == 1
    assert out.startswith(f"FAILED: the operator does not answer on port {gone}: "), out
    assert f"http://127.0.0.1:{gone}/healthz" in out

    # Without the test's Role (the namespace's default account) it says so, in one line.
    unbound = service_account_kubeconfig(
        kubectl, kubeconfig, namespace, "default", tmp_path / "default.kubeconfig"
    )
    code, out = _check(args, operator_health, unbound, "3")
    assert code == 1
    assert out.startswith("FAILED: reading the operator's pods: 403 Forbidden"), out
