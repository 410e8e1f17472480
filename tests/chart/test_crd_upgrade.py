"""Upgrading the CRDs with docs/install.md's command (`kubectl apply --server-side
--force-conflicts -f crds/`) onto CRDs that Helm's first install created, on the real API
server: the new schema is what the API server serves, and again changes nothing. Without
--force-conflicts the apply stops at a conflict with Helm's field manager.

The session's control plane has the chart's CRDs already (applied server-side), so the test
installs copies under a group of their own: "the previous release" is this release's CRDs
with a field missing and its descriptions changed (a new release changes both)."""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import CHART_CRDS, Kubectl, helm

pytestmark = pytest.mark.chart

NEW_FIELD = "topologySpreadConstraints"  # of SpyreModel's spec, missing in the old CRD
INSTALL_MD = CHART_CRDS.parents[2] / "docs" / "install.md"
DOCUMENTED = "kubectl apply --server-side --force-conflicts -f charts/spyre-operator/crds/"


def documented_command(crds: Path) -> list[str]:
    """The upgrade's kubectl arguments as docs/install.md's Upgrading section gives them."""
    upgrading = INSTALL_MD.read_text().split("## Upgrading", 1)[1]
    assert f"\n{DOCUMENTED}\n" in upgrading, f"docs/install.md no longer says {DOCUMENTED!r}"
    return [*DOCUMENTED.split()[1:-1], str(crds)]


def regrouped(group: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted(CHART_CRDS.glob("*.yaml")):
        (crd,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
        crd["spec"]["group"] = group
        crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
        out.append(crd)
    return out


def previous(crds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    old = copy.deepcopy(crds)
    for crd in old:
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema["description"] = "The previous release's description."
        if crd["spec"]["names"]["kind"] == "SpyreModel":
            del schema["properties"]["spec"]["properties"][NEW_FIELD]
    return old


def served_spec(kubectl: Kubectl, name: str) -> dict[str, Any]:
    crd = yaml.safe_load(kubectl("get", "crd", name, "-o", "yaml").stdout)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_server_side_apply_upgrades_crds_helm_created(
    kubeconfig: Path, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    group = f"u{uuid.uuid4().hex[:8]}.spyre.dev"
    new = regrouped(group)
    names = [c["metadata"]["name"] for c in new]
    chart = tmp_path / "old-chart"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: old\nversion: 0.0.1\n")
    for crd in previous(new):
        (chart / "crds" / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd))
    release = f"c{uuid.uuid4().hex[:8]}"
    base = ["--kubeconfig", str(kubeconfig), "--namespace", namespace]
    try:
        helm("install", release, str(chart), *base)
        model = next(n for n in names if n.startswith("spyremodels."))
        shown = kubectl("get", "crd", model, "-o", "yaml", "--show-managed-fields").stdout
        managers = yaml.safe_load(shown)
        fields = managers["metadata"]["managedFields"]  # the status is the API server's
        spec = {(m["manager"], m["operation"]) for m in fields if m.get("subresource") != "status"}
        assert {manager for manager, _ in spec} == {"helm"}
        assert NEW_FIELD not in served_spec(kubectl, model)["properties"]["spec"]["properties"]

        crds = tmp_path / "crds"
        crds.mkdir()
        for crd in new:
            (crds / f"{crd['metadata']['name']}.yaml").write_text(yaml.safe_dump(crd))
        plain = kubectl("apply", "--server-side", "-f", str(crds), check=False)
        assert plain.returncode != 0 and 'conflict with "helm"' in plain.stderr, plain
        for _ in range(2):  # the documented command, twice: the second changes nothing
            applied = kubectl(*documented_command(crds), check=False)
            assert applied.returncode == 0, applied.stderr
        for crd in new:
            kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=120s",
                f"crd/{crd['metadata']['name']}",
            )
            schema = served_spec(kubectl, crd["metadata"]["name"])
            assert schema == crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        # A SpyreModel with the new field is stored with it (the old schema would prune it).
        spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                   "whenUnsatisfiable": "ScheduleAnyway"}]  # fmt: skip
        doc = yaml.safe_load(
            (CHART_CRDS.parents[2] / "examples" / "micro-granite-cpu.yaml").read_text()
        )
        doc["apiVersion"] = f"{group}/v1alpha1"
        doc["metadata"]["namespace"] = namespace
        doc["spec"][NEW_FIELD] = spread
        kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(doc))
        stored = yaml.safe_load(kubectl("get", model, doc["metadata"]["name"], "-n", namespace,
                                        "-o", "yaml").stdout)  # fmt: skip
        assert stored["spec"][NEW_FIELD] == spread
    finally:
        helm("uninstall", release, *base, check=False)
        kubectl("delete", "crd", "--ignore-not-found", *names, check=False)
