"""The generated CRD on the real API server: it installs, the examples and their rendered
children pass server-side dry runs, the schema rejects what it can, and scale works."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_sim import kube_for, wait_for

from spyre_devcluster import simulate
from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.api.validation import validate

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
        ({"nodeSelector": {"zone": "z" * 64}}, "spec.nodeSelector.zone",
         "at most 63 chars|more than 63 bytes"),  # 1.20's wording | later
        ({"tolerations": [{"operator": "Exists"}] * 17}, "spec.tolerations", "at most 16 items"),
    ],
    ids=["chunk-not-64", "context-over-32k", "tp-3", "unknown-task", "negative-replicas",
         "claim-name", "label-value-64", "17-tolerations"],
)  # fmt: skip
def test_schema_rejects_with_a_readable_message(
    crd: None, kubectl: Any, namespace: str, spec: dict[str, Any], field: str, words: str
) -> None:
    doc = json.dumps(valid("bad", **spec))
    result = kubectl("apply", "-n", namespace, "-f", "-", input=doc, check=False)
    assert result.returncode != 0
    assert field in result.stderr, result.stderr
    assert any(w in result.stderr for w in words.split("|")), result.stderr


def test_unknown_fields_are_pruned_however_deep_and_validate_names_them(
    crd: None, kubeconfig: Path, namespace: str
) -> None:
    """The pruning schema (Kubernetes 1.20 too): an unknown field is dropped as the request
    is decoded, however deep the maps below it (kept, 20 levels took the API server half a
    minute of CPU); `validate` names it offline."""
    deep: dict[str, Any] = {}
    for _ in range(20):
        deep = {"n": deep, "m": {"x": 1}}
    kube = kube_for(kubeconfig)
    body = valid(
        "deep",
        tensorParalelSize=4,
        resources={"limits": {"cpu": "1"}, "extra": deep},
        affinity={"nodeAffinity": deep},
    )
    body["metadata"]["namespace"] = namespace
    stored = kube.create(body)  # its cost by depth, pruned or kept: benchmarks/crd_cost.py
    assert "tensorParalelSize" not in stored["spec"]
    assert stored["spec"]["resources"] == {"limits": {"cpu": "1"}}
    assert stored["spec"]["affinity"] == {"nodeAffinity": {}}
    assert {str(p) for p in validate(body)} == {
        "spec.tensorParalelSize: unknown field: did you mean tensorParallelSize?",
        "spec.resources.extra: unknown field (fields here: limits, requests)",
        "spec.affinity.nodeAffinity.n: unknown field (fields here: "
        "preferredDuringSchedulingIgnoredDuringExecution, "
        "requiredDuringSchedulingIgnoredDuringExecution)",
        "spec.affinity.nodeAffinity.m: unknown field (fields here: "
        "preferredDuringSchedulingIgnoredDuringExecution, "
        "requiredDuringSchedulingIgnoredDuringExecution)",
    }


def test_kubectl_refuses_unknown_fields_by_name_and_without_validation_they_are_pruned(
    crd: None, kubectl: Any, namespace: str
) -> None:
    """kubectl's field validation (its default, strict): server-side from Kubernetes 1.25
    (the API server refuses `spec.tensorParalelSize` by its path), against the published
    schema before (1.20 publishes the spec's fields now that nothing keeps unknown fields).
    Without it the field is dropped silently."""
    doc = json.dumps(valid("typo", tensorParalelSize=4))
    result = kubectl("apply", "-n", namespace, "-f", "-", input=doc, check=False)
    assert result.returncode != 0
    assert re.search(r'unknown field "(spec\.)?tensorParalelSize"', result.stderr), result.stderr
    kubectl("apply", "--validate=false", "-n", namespace, "-f", "-", input=doc)
    spec = json.loads(kubectl("get", "-n", namespace, "sm", "typo", "-o", "json").stdout)["spec"]
    assert "tensorParalelSize" not in spec and spec["replicas"] == 1


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
    """kubectl explain reads the server's OpenAPI (v2 on Kubernetes 1.20, which lists an
    object's fields only if it keeps no unknown fields: the pruning schema)."""

    def explain(path: str) -> str:
        # a fresh cache: kubectl must read the schema the server publishes now
        return kubectl("--cache-dir", str(tmp_path), "explain", path, check=False).stdout

    def compile_explained() -> str | None:
        out = explain("spyremodel.spec.cache.compile")
        return out if "How long a compile pod may run" in out else None

    wait_for(compile_explained, "kubectl explain shows the spec's fields")
    assert "What to serve and how" in explain("spyremodel.spec")
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
