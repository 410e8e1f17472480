"""The install story of docs/install.md on the real API server: helm install, a CRD
upgrade by server-side apply, helm upgrade to another mode, helm uninstall (the CRD and
the graph cache volumes stay)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from chartlib import CHART, CHART_CRDS, ROOT, Kubectl, helm, set_args

from spyre_operator.api.validation import parse
from spyre_operator.render.children import build_cache_pvc
from spyre_operator.render.yamlio import load_documents

pytestmark = pytest.mark.chart

EXAMPLE = ROOT / "examples" / "micro-granite-cpu.yaml"


def test_install_upgrade_uninstall(
    kubeconfig: Path,
    kubectl: Kubectl,
    namespace: str,
    make_namespace: Callable[[], str],
    spyremodel_crd: str,
) -> None:
    release = f"i{uuid.uuid4().hex[:8]}"
    base = ["--kubeconfig", str(kubeconfig), "--namespace", namespace]
    fullname = f"{release}-spyre-operator"

    # A wrong value stops `helm install` before anything is created.
    bad = helm("install", release, str(CHART), *base, "--set", "rbac.mode=everything", check=False)
    assert bad.returncode != 0
    assert "/rbac/mode" in bad.stderr, bad.stderr

    helm("install", release, str(CHART), *base)
    deploy = kubectl("get", "deployment", fullname, "-n", namespace, "-o", "name").stdout
    assert deploy.strip() == f"deployment.apps/{fullname}"
    kubectl("get", "clusterrole", fullname)
    kubectl("get", "validatingwebhookconfiguration", f"{fullname}-webhook")
    kubectl("get", "secret", f"{fullname}-webhook-cert", "-n", namespace)

    # Upgrading: CRDs first (Helm never upgrades crds/), then the release, here to
    # namespaced mode.
    kubectl("apply", "--server-side", "-f", str(CHART_CRDS))
    watched = make_namespace()
    values = {"rbac.mode": "namespaced", "watchNamespaces": [watched]}
    helm("upgrade", release, str(CHART), *base, "--reset-then-reuse-values", *set_args(values))
    kubectl("get", "role", fullname, "-n", watched)
    kubectl("get", "clusterrole", f"{fullname}-framework")
    gone = kubectl("get", "clusterrole", fullname, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    args = kubectl(
        "get", "deployment", fullname, "-n", namespace,
        "-o", "jsonpath={.spec.template.spec.containers[0].args}",
    ).stdout  # fmt: skip
    assert f"--namespace={watched}" in args

    # A cache volume as the operator makes it (not part of the release) survives.
    model = parse(load_documents(EXAMPLE.read_text())[0])
    pvc = build_cache_pvc(model.spec, watched)
    kubectl("apply", "-f", "-", input=yaml.safe_dump(pvc))

    helm("uninstall", release, *base, "--wait", "--timeout=120s")
    for what in (
        ["deployment", fullname, "-n", namespace],
        ["role", fullname, "-n", watched],
        ["validatingwebhookconfiguration", f"{fullname}-webhook"],
    ):
        result = kubectl("get", *what, check=False)
        assert result.returncode != 0 and "NotFound" in result.stderr, result
    kubectl("get", "crd", spyremodel_crd)  # Helm never deletes crds/
    kept = kubectl("get", "pvc", "-n", watched, "-l", "app.kubernetes.io/component=graph-cache",
                   "-o", "name").stdout  # fmt: skip
    assert kept.strip() == f"persistentvolumeclaim/{pvc['metadata']['name']}"
