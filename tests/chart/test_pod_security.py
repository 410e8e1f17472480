"""Pod Security admission (the `restricted` profile) of every pod the operator and the chart
make, on the real API server: in a namespace labelled
`pod-security.kubernetes.io/enforce: restricted`, a Pod made from each pod template passes a
server-side dry run: the serving Deployment and the weights, pull, compile and clean-up Jobs
of every example, with `--platform` kubernetes and openshift; the chart's operator
Deployment and its `helm test` pod, with the default values and docs/install.md's OpenShift
ones; the pods docs/ tells users to run by hand (a Job's YAML, a `kubectl run --overrides`).
A model's hostPath source, which restricted forbids, is refused in the admission's own
words (the label is enforced)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from chartlib import ROOT, render
from kubernetes import client

from spyre_operator.api.runtimes import PLATFORMS, CacheSharing, Platform
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import ApiError, Kube, load_api_client
from spyre_operator.render import meta
from spyre_operator.render.children import build_cleanup_job, desired
from spyre_operator.render.yamlio import load_documents

pytestmark = pytest.mark.chart

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))
UID = "0a0a0a0a-0000-0000-0000-000000000000"
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # a hub model's resolved revision
SHARING = CacheSharing("registry.example.com/spyre/caches", "registry-creds")  # the pull Job
# docs/install.md's OpenShift install: the SCC assigns the ids
OPENSHIFT = {
    "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
    "operator.platform": "openshift",
}


@pytest.fixture
def restricted(namespace: str, api_client: client.ApiClient) -> str:
    """The test's namespace, labelled to enforce the restricted profile."""
    client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    return namespace


@pytest.fixture
def kube(kubeconfig: Path) -> Kube:
    return Kube(load_api_client(str(kubeconfig)))


def refusals(kube: Kube, namespace: str, owners: list[dict[str, Any]]) -> dict[str, str]:
    """What the API server says about a Pod made from each owner's template (a dry run),
    by owner; the ServiceAccounts they name are made first (admission looks them up)."""
    pods = {f"{o['kind']} {o['metadata']['name']}": as_pod(o) for o in owners}
    base = f"/api/v1/namespaces/{namespace}"
    for account in {p["spec"].get("serviceAccountName", "default") for p in pods.values()}:
        try:
            kube.request("POST", f"{base}/serviceaccounts", {"metadata": {"name": account}})
        except ApiError as err:
            if err.status != 409:  # made for an earlier owner, or by the controller manager
                raise
    found = {}
    for owner, pod in pods.items():
        try:
            kube.request("POST", f"{base}/pods", pod, query={"dryRun": "All"})
        except ApiError as err:
            found[owner] = str(err.body.get("message", err))
    return found


def as_pod(owner: dict[str, Any]) -> dict[str, Any]:
    """The Pod a controller makes from the owner's template (a Pod as it is)."""
    template = owner if owner["kind"] == "Pod" else owner["spec"]["template"]
    spec, labels = template["spec"], template.get("metadata", {}).get("labels", {})
    name = owner["metadata"]["name"][:50].rstrip("-.") + "-pod"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": copy.deepcopy(spec),
    }


def with_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "Pod" or "template" in o.get("spec", {})]


def operator_pods(doc: dict[str, Any], platform: Platform) -> list[dict[str, Any]]:
    """The owners of every pod the operator makes for the document with `platform`."""
    model = parse(doc, kind=doc["kind"])
    want = desired(model, UID, platform, commit=COMMIT, sharing=SHARING)
    return with_pods([*want.objects(), build_cleanup_job(model, UID, platform, COMMIT)])


def examples() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in EXAMPLES for doc in load_documents(path.read_text(), str(path))]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_pod_the_operator_makes_is_admitted_under_restricted(
    platform: Platform, restricted: str, kube: Kube
) -> None:
    owners = []
    for path, doc in examples():
        for owner in operator_pods(doc, platform):
            owner["metadata"]["name"] = f"{path.stem}-{owner['metadata']['name']}"[:63]
            owners.append(owner)
    made = {as_pod(o)["metadata"]["labels"][meta.COMPONENT_LABEL] for o in owners}
    assert made == {meta.SERVER, meta.WEIGHTS, meta.PULL, meta.COMPILE, meta.CLEANUP}, made
    assert refusals(kube, restricted, owners) == {}


def test_a_hostpath_model_is_refused_in_the_admissions_words(restricted: str, kube: Kube) -> None:
    (doc,) = load_documents((ROOT / "examples" / "micro-granite-cpu.yaml").read_text())
    doc["spec"]["model"] = {"path": "/models/granite", "source": {"hostPath": {"path": "/srv"}}}
    (deployment,) = [o for o in operator_pods(doc, "kubernetes") if o["kind"] == "Deployment"]
    (message,) = refusals(kube, restricted, [deployment]).values()
    assert message.startswith(f'pods "{as_pod(deployment)["metadata"]["name"]}" is forbidden')
    assert 'violates PodSecurity "restricted:latest"' in message, message
    assert 'volume "model" uses restricted volume type "hostPath"' in message, message


@pytest.mark.parametrize("values", [{}, OPENSHIFT], ids=["default", "openshift"])
def test_the_charts_pods_are_admitted_under_restricted(
    values: dict[str, Any], restricted: str, kube: Kube
) -> None:
    owners = with_pods(render(restricted, values, tests=True))
    assert {o["kind"] for o in owners} == {"Deployment", "Pod"}, owners
    assert refusals(kube, restricted, owners) == {}


def recipes() -> list[dict[str, Any]]:
    """The Pods and Jobs of docs/*.md: YAML blocks, and `kubectl run`'s --overrides."""
    found = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL):
            found += [d for d in yaml.safe_load_all(block) if d and d.get("kind") in ("Job", "Pod")]
        for run in re.finditer(r"kubectl run -n NS (\S+) .*?--overrides='(.*?)'", text, re.DOTALL):
            found.append({"kind": "Pod", "metadata": {"name": run[1]}} | json.loads(run[2]))
    for recipe in found:
        recipe["metadata"].pop("namespace", None)
    return found


def test_the_pods_the_docs_have_users_run_are_admitted_under_restricted(
    restricted: str, kube: Kube
) -> None:
    owners = recipes()
    assert {o["metadata"]["name"] for o in owners} >= {"preload-granite", "weights-shell"}
    assert refusals(kube, restricted, owners) == {}
