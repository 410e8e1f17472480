"""The OLM bundle (deploy/olm/bundle/) is what deploy/olm/generate.py makes of the chart, and
the operator framework's own validator (github.com/operator-framework/api, built from its
Go module by deploy/olm/validate) passes it with the OperatorHub suites, with no warning
but the one below."""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chartlib import ROOT, find, render

pytestmark = pytest.mark.chart

OLM = ROOT / "deploy" / "olm"
BUNDLE = OLM / "bundle"
VALIDATOR = OLM / "validate"
CSV = BUNDLE / "manifests" / "spyre-operator.clusterserviceversion.yaml"
CACHE = Path(os.environ.get("SPYRE_SERVING_CACHE", Path.home() / ".cache" / "spyre-serving"))
K8S_VERSION = "1.37"  # the API server tier's Kubernetes: no API the bundle uses is removed
# The deprecated-API check reads any RBAC rule on policy's poddisruptionbudgets as the
# policy/v1beta1 API removed in 1.25: RBAC rules name no version, and the operator writes
# policy/v1 wherever it is served (kube/client.policy_version).
KNOWN_WARNINGS = ("Migrate the API(s) for poddisruptionbudgets",)


@pytest.fixture(scope="module")
def validator() -> Path:
    """The validator, built once per version of its sources (go.mod, go.sum, main.go)."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((VALIDATOR / name).read_bytes())
    binary = CACHE / "tools" / "olm-validate" / digest.hexdigest()[:16] / "olm-validate"
    if not binary.exists():
        go = shutil.which("go")
        assert go, "the go command is not on PATH (the validator is a Go program)"
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}
        subprocess.run(
            [go, "build", "-o", str(partial), "."], cwd=VALIDATOR, env=env, check=True, timeout=1200
        )
        partial.replace(binary)
    return binary


def validate(validator: Path, bundle: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(validator), "-k8s-version", K8S_VERSION, str(bundle)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_bundle_is_what_the_generator_makes_of_the_chart(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    subprocess.run(
        [sys.executable, str(OLM / "generate.py"), "--output", str(out)], check=True, timeout=120
    )
    made = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    kept = sorted(p.relative_to(BUNDLE) for p in BUNDLE.rglob("*") if p.is_file())
    assert made == kept
    differ = [str(p) for p in made if not filecmp.cmp(out / p, BUNDLE / p, shallow=False)]
    assert not differ, f"{differ} differ from the chart's: run `python deploy/olm/generate.py`"


def test_the_csv_carries_the_charts_rbac_deployment_and_webhook() -> None:
    (csv,) = [d for d in yaml.safe_load_all(CSV.read_text()) if d]
    # as generate.py renders the chart: a release's values (no card image of ours)
    values = {"webhook.certificates.source": "cert-manager", "runtimeImage.cards": False}
    docs = render("spyre-system", values, release="spyre-operator")  # generate.py's release
    install = csv["spec"]["install"]["spec"]
    (permissions,) = install["clusterPermissions"]
    roles = find(docs, "ClusterRole")
    (picker,) = [r for r in roles if r["metadata"]["name"].endswith("-endpoint-picker")]
    (role,) = [r for r in roles if r is not picker]
    assert permissions["rules"] == role["rules"]
    bundled = yaml.safe_load((CSV.parent / "endpoint-picker.clusterrole.yaml").read_text())
    assert bundled["metadata"]["name"] == picker["metadata"]["name"]
    assert bundled["rules"] == picker["rules"]
    (deployment,) = install["deployments"]
    (chart_deploy,) = find(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (chart_container,) = chart_deploy["spec"]["template"]["spec"]["containers"]
    cert_dir = "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs"  # OLM's mount
    assert container["args"][-1] == cert_dir
    assert container["args"][:-1] == chart_container["args"][:-1]
    assert container["image"] == chart_container["image"]
    (hook,) = csv["spec"]["webhookdefinitions"]
    (configuration,) = find(docs, "ValidatingWebhookConfiguration")
    assert hook["rules"] == configuration["webhooks"][0]["rules"]
    owned = {c["name"] for c in csv["spec"]["customresourcedefinitions"]["owned"]}
    assert owned == {"spyremodels.serving.spyre.dev", "spyrecaches.serving.spyre.dev"}


def test_the_operator_framework_validator_passes_the_bundle(validator: Path) -> None:
    result = validate(validator, BUNDLE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "spyre-operator.v0.1.0: valid" in result.stdout
    warnings = [line for line in result.stdout.splitlines() if line.startswith("Warning")]
    unknown = [w for w in warnings if not any(known in w for known in KNOWN_WARNINGS)]
    assert not unknown, "\n".join(unknown)


def test_the_validator_refuses_a_bundle_the_operatorhub_would(
    validator: Path, tmp_path: Path
) -> None:
    """The same validator on a copy without maintainers' emails and with an unknown
    category: it names both (it really checks what the test above says it passed)."""
    broken = tmp_path / "bundle"
    shutil.copytree(BUNDLE, broken)
    path = broken / CSV.relative_to(BUNDLE)
    (csv,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    csv["metadata"]["annotations"]["categories"] = "Spyre Things"
    for maintainer in csv["spec"]["maintainers"]:
        del maintainer["email"]
    path.write_text(yaml.safe_dump(csv))
    result = validate(validator, broken)
    assert result.returncode == 1, result.stdout
    assert "csv.Spec.Maintainers elements should contain both name and email" in result.stdout
    assert "Spyre Things" in result.stdout
