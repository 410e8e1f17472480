"""The generated CRD on the real API server: it installs, the examples and their rendered
children pass server-side dry runs, the schema rejects what it can, and scale works."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_sim import kube_for, wait_for

from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.local import simulate

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def crd(kubeconfig: Path) -> None:
    simulate.install_crds(kube_for(kubeconfig))


def valid(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"id": "ibm-granite/granite-3.3-8b-instruct"},
        "batching": {"continuous": {"maxModelLen": 8192, "maxNumSeqs": 4}},
    }
    body.update(spec)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": body}


def test_crd_is_established_with_its_short_name(crd: None, kubectl: Any) -> None:
    resources = kubectl("api-resources", "--api-group=serving.spyre.dev", "-o", "wide").stdout
    line = next(ln for ln in resources.splitlines() if ln.startswith("spyremodels"))
    assert " sm " in f" {line} "
    assert "SpyreModel" in line


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_and_its_rendered_children_pass_a_server_dry_run(
    crd: None, kubectl: Any, namespace: str, path: Path
) -> None:
    kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
    # --commit: a hub model's revision as the weights Job would resolve it.
    commit = "c0ffee0000000000000000000000000000c0ffee"
    command = ["render", "--namespace", namespace, str(path), "--commit", commit]
    rendered = subprocess.run(
        [sys.executable, "-m", "spyre_operator", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered) if doc]
    assert {"Job", "Deployment", "Service"} <= set(kinds)
    result = kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert result.stdout.count("(server dry run)") == len(kinds)


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        (
            {"batching": {"continuous": {"maxModelLen": 8192, "maxNumSeqs": 4,
                                         "maxNumBatchedTokens": 1000}}},
            "spec.batching.continuous.maxNumBatchedTokens",
            "multiple of 64",
        ),
        (
            {"batching": {"continuous": {"maxModelLen": 65536, "maxNumSeqs": 4}}},
            "spec.batching.continuous.maxModelLen",
            "less than or equal to 32768",
        ),
        ({"tensorParallelSize": 3}, "spec.tensorParallelSize", "supported values"),
        ({"task": "chat"}, "spec.task", "supported values"),
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        ({"cache": {"volume": {"claimName": "Bad_Claim"}}}, "spec.cache.volume.claimName",
         "should match"),
        ({"nodeSelector": {"zone": "z" * 64}}, "spec.nodeSelector.zone", "at most 63 chars"),
        ({"tolerations": [{"operator": "Exists"}] * 33}, "spec.tolerations", "at most 32 items"),
    ],
    ids=["chunk-not-64", "context-over-32k", "tp-3", "unknown-task", "negative-replicas",
         "claim-name", "label-value-64", "33-tolerations"],
)  # fmt: skip
def test_schema_rejects_with_a_readable_message(
    crd: None, kubectl: Any, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    doc = json.dumps(valid("bad", **spec))
    result = kubectl("apply", "-n", namespace, "-f", "-", input=doc, check=False)
    assert result.returncode != 0
    assert field in result.stderr, result.stderr
    assert words in result.stderr, result.stderr


def test_unknown_fields_in_affinity_are_pruned_however_deep(
    crd: None, kubeconfig: Path, namespace: str
) -> None:
    """A free-form affinity nested 20 levels kept a 1.20 API server busy for minutes; the
    typed schema prunes what is not Affinity as the request is decoded."""
    deep: dict[str, Any] = {}
    for _ in range(20):
        deep = {"n": deep}
    kube = kube_for(kubeconfig)
    body = valid("deep", affinity={"nodeAffinity": deep})
    body["metadata"]["namespace"] = namespace
    started = time.monotonic()
    stored = kube.create(body)
    assert time.monotonic() - started < 10
    assert stored["spec"]["affinity"] == {"nodeAffinity": {}}


def test_kubectl_scale_goes_through_the_scale_subresource(
    crd: None, kubectl: Any, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(valid("scaled")))
    kubectl("scale", "-n", namespace, "spyremodel/scaled", "--replicas=3")
    replicas = kubectl(
        "get", "-n", namespace, "sm", "scaled", "-o", "jsonpath={.spec.replicas}"
    ).stdout
    assert replicas == "3"
    scale = json.loads(
        kubectl(
            "get", "--raw",
            f"/apis/{API_VERSION}/namespaces/{namespace}/spyremodels/scaled/scale",
        ).stdout
    )  # fmt: skip
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 3


def test_an_unset_replicas_reads_as_one_through_the_scale_subresource(
    crd: None, kubectl: Any, namespace: str
) -> None:
    # what an HPA reads: 0 here would make it report "scaling is disabled"
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(valid("unset")))
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/spyremodels/unset/scale"
    scale = json.loads(kubectl("get", "--raw", path).stdout)
    assert scale["spec"]["replicas"] == 1
    row = kubectl("get", "-n", namespace, "sm", "unset", "--no-headers").stdout.split()
    assert row[-2:-1] == ["1"], row  # the Replicas column (Endpoint is empty: not reconciled)


def test_kubectl_explain_shows_the_descriptions_the_server_publishes(
    crd: None, kubectl: Any, tmp_path: Path
) -> None:
    """kubectl explain reads the server's OpenAPI. Kubernetes 1.20 publishes only v2, where
    an object that keeps unknown fields (the spec, docs/api.md) is listed without its
    fields: the spec's own description shows, and every status field with its own."""

    def explain(path: str) -> str:
        # a fresh cache: kubectl must read the schema the server publishes now
        return kubectl("--cache-dir", str(tmp_path), "explain", path, check=False).stdout

    def spec_explained() -> str | None:
        out = explain("spyremodel.spec")
        return out if "What to serve and how" in out else None

    wait_for(spec_explained, "kubectl explain shows the description of spec")
    cache = explain("sm.status.cache")
    assert "The compile Job's outcome" in cache, cache
    assert "cacheKey\t<string>" in cache and "The cache key it compiled." in cache, cache
    assert "metav1.Conditions" in explain("sm.status.conditions")


def test_kubectl_get_all_and_its_category_list_spyremodels(
    crd: None, kubectl: Any, namespace: str, tmp_path: Path
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(valid("listed")))
    for category in ("all", "spyre"):
        out = kubectl("--cache-dir", str(tmp_path), "get", category, "-n", namespace,
                      "-o", "name").stdout  # fmt: skip
        assert "spyremodel.serving.spyre.dev/listed" in out.split(), (category, out)
