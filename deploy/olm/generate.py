"""The OLM bundle (deploy/olm/bundle/), generated from the chart, its CRDs and examples/:
one source for the RBAC, the Deployment, the webhook and the CRDs. The chart is rendered
with rbac.mode=cluster and webhook.certificates.source=cert-manager (the operator serves the
certificate someone else mounts); OLM mounts its own in place of cert-manager's.

    python deploy/olm/generate.py [--output DIR]

tests/chart/test_olm_bundle.py checks the committed bundle is what this writes, and runs the
operator framework's validator (deploy/olm/validate) on it.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster.tools import tool
from spyre_operator.api.runtimes import default_image
from spyre_operator.settings import Settings
from spyre_runtime.contract import FLAVOURS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "spyre-operator"
BUNDLE = Path(__file__).parent / "bundle"
PACKAGE = "spyre-operator"
CHANNEL = "candidate"  # OLM's channel naming: candidate, fast, stable
NAMESPACE = "spyre-system"  # the suggested namespace; OLM installs into the chosen one
# Where OLM mounts the webhook's serving certificate (tls.crt, tls.key) it generates.
OLM_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
ARCHITECTURES = ("amd64", "ppc64le", "s390x")  # where Spyre cards are: x86, Power, Z
EXAMPLES = ("micro-granite-cpu.yaml", "caches/micro-granite-fleet.yaml")
DESCRIPTION = """\
Installed through OLM, the operator watches SpyreModels and SpyreCaches in every namespace;
its validating webhook serves the certificate OLM makes for it. Monitoring (the serving
monitor, the operator's monitor, the alerts and the dashboard) comes with the Helm chart:
docs/operations.md in the repository."""
DOCS = "blob/main/docs/install.md"
HELM_ONLY = ("app.kubernetes.io/managed-by", "helm.sh/chart")
# OpenShift's console reads these (docs: "Operator metadata: infrastructure features").
FEATURES = {
    "disconnected": "true",  # every image is in relatedImages; oc-mirror copies them
    "fips-compliant": "false",
    "proxy-aware": "false",
    "tls-profiles": "false",
    "token-auth-aws": "false",
    "token-auth-azure": "false",
    "token-auth-gcp": "false",
    "cnf": "false",
    "cni": "false",
    "csi": "false",
}


# What a SpyreModel makes (the console lists them under it) and what it shows of one.
CHILDREN = ("Job", "Deployment", "Service", "PersistentVolumeClaim")
SPEC_DESCRIPTOR = {
    "path": "model.id",
    "displayName": "Model",
    "description": "The model's id.",
    "x-descriptors": ["urn:alm:descriptor:com.tectonic.ui:text"],
}
STATUS_DESCRIPTORS = [
    {
        "path": "phase",
        "displayName": "Phase",
        "description": "Where it stands.",
        "x-descriptors": ["urn:alm:descriptor:io.kubernetes.phase"],
    },
    {
        "path": "conditions",
        "displayName": "Conditions",
        "description": "The conditions (kstatus: Ready, Reconciling, Stalled).",
        "x-descriptors": ["urn:alm:descriptor:io.kubernetes.conditions"],
    },
]


def rendered() -> list[dict[str, Any]]:
    values = {
        "rbac.mode": "cluster",
        "webhook.certificates.source": "cert-manager",
        "runtimeImage.cards": False,  # as a release's chart: no card image of ours is built
    }
    sets = [a for k, v in values.items() for a in ("--set-json", f"{k}={json.dumps(v)}")]
    out = subprocess.run(
        [tool("helm"), "template", PACKAGE, str(CHART), "--namespace", NAMESPACE, *sets,
         "--skip-tests"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


PICKER_ROLE = "-endpoint-picker"  # the chart's ClusterRole of spec.routing's pickers


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one `kind` of the chart's, the pickers' ClusterRole aside (picker_role)."""
    (doc,) = [
        d for d in docs if d["kind"] == kind and not d["metadata"]["name"].endswith(PICKER_ROLE)
    ]
    return doc


def picker_role(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ClusterRole the operator binds to each endpoint picker (spec.routing): a bundle
    manifest of its own (OLM installs ClusterRoles of the bundle as they are)."""
    (doc,) = [
        d
        for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(PICKER_ROLE)
    ]
    name = doc["metadata"]["name"]
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": {"name": name}} | {
        "rules": doc["rules"]
    }


def olm_deployment(deploy: dict[str, Any]) -> dict[str, Any]:
    """The chart's Deployment, OLM's certificate mounted in place of cert-manager's and the
    watched namespaces from the OperatorGroup (empty: all)."""
    spec = copy.deepcopy(deploy["spec"])
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    for key in HELM_ONLY:
        labels.pop(key, None)
    pod["volumes"] = [v for v in pod["volumes"] if "secret" not in v]
    (container,) = pod["containers"]
    kept = {v["name"] for v in pod["volumes"]}
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] in kept]
    args = [a for a in container["args"] if not a.startswith("--webhook-cert-dir=")]
    container["args"] = [*args, f"--webhook-cert-dir={OLM_CERT_DIR}"]
    annotation = "metadata.annotations['olm.targetNamespaces']"
    container["env"] = [
        *container.get("env", []),
        {"name": "SPYRE_OPERATOR_NAMESPACES", "valueFrom": {"fieldRef": {"fieldPath": annotation}}},
    ]
    return {"name": deploy["metadata"]["name"], "label": labels, "spec": spec}


def webhook_definitions(
    configuration: dict[str, Any], deploy: dict[str, Any]
) -> list[dict[str, Any]]:
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "webhook"]
    out = []
    for hook in configuration["webhooks"]:
        out.append({
            "type": "ValidatingAdmissionWebhook",
            "generateName": hook["name"],
            "deploymentName": deploy["metadata"]["name"],
            "containerPort": port,
            "webhookPath": hook["clientConfig"]["service"]["path"],
            "admissionReviewVersions": hook["admissionReviewVersions"],
            "failurePolicy": hook["failurePolicy"],
            "matchPolicy": hook["matchPolicy"],
            "rules": hook["rules"],
            "sideEffects": hook["sideEffects"],
            "timeoutSeconds": hook["timeoutSeconds"],
        })  # fmt: skip
    return out


def crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))]


def owned(crd: dict[str, Any]) -> dict[str, Any]:
    names = crd["spec"]["names"]
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    described = version["schema"]["openAPIV3Schema"]["description"]
    return {
        "name": crd["metadata"]["name"],
        "kind": names["kind"],
        "version": version["name"],
        "displayName": names["kind"],
        "description": described.split("\n")[0],
        "resources": [{"kind": kind, "name": "", "version": "v1"} for kind in CHILDREN],
        "specDescriptors": [SPEC_DESCRIPTOR],
        "statusDescriptors": STATUS_DESCRIPTORS,
    }


def examples() -> list[dict[str, Any]]:
    docs = []
    for name in EXAMPLES:
        docs += [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if d][:1]
    return docs


def related_images(operator_image: str) -> list[dict[str, str]]:
    images = [{"name": "operator", "image": operator_image}]
    for flavour in FLAVOURS.values():
        image = default_image(flavour.name, flavour.default_version)
        images.append({"name": f"runtime-{flavour.name}", "image": image})
    picker = Settings.model_fields["picker_image"].default
    return [*images, {"name": "endpoint-picker", "image": picker}]


def csv(docs: list[dict[str, Any]]) -> dict[str, Any]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    deploy = one(docs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    icon = base64.b64encode((ROOT / "docs" / "images" / "icon.svg").read_bytes()).decode()
    annotations = {
        "alm-examples": json.dumps(examples()),
        "capabilities": "Basic Install",
        "categories": "AI/Machine Learning",
        "containerImage": container["image"],
        "description": chart["description"].strip(),
        "operatorframework.io/suggested-namespace": NAMESPACE,
        "repository": chart["home"],
        "support": chart["maintainers"][0]["name"],
        **{f"features.operators.openshift.io/{k}": v for k, v in FEATURES.items()},
    }
    return {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": f"{PACKAGE}.v{chart['version']}",
            "annotations": annotations,
            "labels": {f"operatorframework.io/arch.{a}": "supported" for a in ARCHITECTURES}
            | {"operatorframework.io/os.linux": "supported"},
        },
        "spec": {
            "displayName": "Spyre Serving",
            "description": f"{chart['description'].strip()}\n\n{DESCRIPTION}",
            "version": chart["version"],
            "minKubeVersion": chart["kubeVersion"].removeprefix(">=").removesuffix("-0"),
            "maturity": "alpha",
            "provider": {"name": "spyre-serving", "url": chart["home"]},
            "maintainers": [{"name": m["name"], "email": m["email"]} for m in chart["maintainers"]],
            "links": [{"name": "Documentation", "url": f"{chart['home']}/{DOCS}"}],
            "keywords": chart["keywords"],
            "icon": [{"base64data": icon, "mediatype": "image/svg+xml"}],
            "installModes": [
                {"type": "OwnNamespace", "supported": False},
                {"type": "SingleNamespace", "supported": False},
                {"type": "MultiNamespace", "supported": False},
                {"type": "AllNamespaces", "supported": True},
            ],
            "customresourcedefinitions": {"owned": [owned(c) for c in crds()]},
            "install": {
                "strategy": "deployment",
                "spec": {
                    "clusterPermissions": [
                        {"serviceAccountName": account, "rules": one(docs, "ClusterRole")["rules"]}
                    ],
                    "deployments": [olm_deployment(deploy)],
                },
            },
            "webhookdefinitions": webhook_definitions(
                one(docs, "ValidatingWebhookConfiguration"), deploy
            ),
            "relatedImages": related_images(container["image"]),
        },
    }


def metadata() -> dict[str, Any]:
    prefix = "operators.operatorframework.io.bundle"
    return {"annotations": {
        f"{prefix}.mediatype.v1": "registry+v1",
        f"{prefix}.manifests.v1": "manifests/",
        f"{prefix}.metadata.v1": "metadata/",
        f"{prefix}.package.v1": PACKAGE,
        f"{prefix}.channels.v1": CHANNEL,
        f"{prefix}.channel.default.v1": CHANNEL,
    }}  # fmt: skip


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=100)


def write(output: Path) -> None:
    if output.exists():
        shutil.rmtree(output)
    (output / "manifests").mkdir(parents=True)
    (output / "metadata").mkdir()
    header = "# Generated by deploy/olm/generate.py from the chart: edit the chart, not this.\n"
    docs = rendered()
    the_csv = csv(docs)
    (output / "manifests" / f"{PACKAGE}.clusterserviceversion.yaml").write_text(
        header + dump(the_csv)
    )
    role = picker_role(docs)
    (output / "manifests" / "endpoint-picker.clusterrole.yaml").write_text(header + dump(role))
    for path in sorted((CHART / "crds").glob("*.yaml")):
        # one document a file: OLM's loader reads the first (the chart's starts with `---`)
        (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
        (output / "manifests" / path.name).write_text(header + dump(doc))
    annotations = metadata()
    (output / "metadata" / "annotations.yaml").write_text(header + dump(annotations))
    labels = "".join(f"LABEL {k}={v}\n" for k, v in annotations["annotations"].items())
    copies = "COPY manifests /manifests/\nCOPY metadata /metadata/\n"
    (output / "bundle.Dockerfile").write_text(f"{header}FROM scratch\n{labels}{copies}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=BUNDLE, help="default: %(default)s")
    write(parser.parse_args(argv).output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
