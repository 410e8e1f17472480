"""The CRD: generated from the models, committed in sync, a pruning structural schema,
Kubernetes 1.20-safe."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from apilib import ROOT
from pydantic import ValidationError

from spyre_operator.api.base import QUANTITY
from spyre_operator.api.crd import CACHE_CRD_FILES, CRD_FILES, build_cache_crd, build_crd
from spyre_operator.api.status import CompileSummary, SpyreModelStatus
from spyre_operator.cli.render import crd_yaml

pytestmark = pytest.mark.unit

FIX = "regenerate with `spyre-operator crd --write` and commit the result"


@pytest.mark.parametrize(
    ("name", "kind"),
    [(n, "SpyreModel") for n in CRD_FILES] + [(n, "SpyreCache") for n in CACHE_CRD_FILES],
)
def test_committed_crd_matches_the_models(name: str, kind: str) -> None:
    path = ROOT / name
    assert path.exists(), f"{name} is missing: {FIX}"
    assert path.read_text() == crd_yaml(kind), f"{name} is out of date: {FIX}"


def _schema() -> dict[str, Any]:
    version = build_crd()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _nodes(node[key], f"{path}[{key}]")


def test_schema_is_structural_without_features_kubernetes_1_20_lacks() -> None:
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "nullable", "const", "title",
                 "x-kubernetes-validations"}  # fmt: skip
    for path, node in _nodes(_schema()):
        assert not forbidden & node.keys(), (path, node)
        # defaults live in the descriptions, but the one the scale subresource reads and
        # the status of an object the operator has not seen yet (kstatus: InProgress)
        assert "default" not in node or path in (".spec.replicas", ".status"), (path, node)
        assert node.get("additionalProperties") is not False, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path


def test_every_property_has_a_description_for_kubectl_explain() -> None:
    # properties are the nodes reached by a name (list items and map values are described
    # by the property that holds them); the API server explains metadata itself and
    # refuses a description there
    missing = [path or "(root)" for path, node in _nodes(_schema())
               if path != ".metadata" and not path.endswith("]")
               and not node.get("description")]  # fmt: skip
    assert not missing, f"add a docstring to these fields in api/*.py: {missing}"


def _at(path: str) -> dict[str, Any]:
    node = _schema()
    for name in path.split("."):
        node = node["items"] if name == "[]" else node["properties"][name]
    return node


def test_schema_carries_the_bounds_the_api_server_can_enforce() -> None:
    chunk = _at("spec.batching.continuous.maxNumBatchedTokens")
    assert (chunk["multipleOf"], chunk["minimum"], chunk["maximum"]) == (64, 64, 32768)
    assert "Default: 1024." in chunk["description"]
    assert _at("spec.batching.continuous.maxModelLen")["maximum"] == 32768
    assert _at("spec.batching.static.promptLens.[]")["multipleOf"] == 64
    assert _at("spec.batching.static.newTokens.[]")["minimum"] == 2
    assert _at("spec.tensorParallelSize")["enum"] == [1, 2, 4]
    assert _at("spec.runtime.flavour")["enum"] == ["vllm-spyre", "sendnn-inference"]
    assert (_at("spec.service.port")["minimum"], _at("spec.service.port")["maximum"]) == (1, 65535)
    assert _at("spec.replicas")["minimum"] == 0
    assert _at("spec.resources.limits")["additionalProperties"] == {
        "maxLength": 64,
        "pattern": QUANTITY.pattern,
        "x-kubernetes-int-or-string": True,
    }
    assert _at("spec.cache.volume.size") == {
        "description": "Requested size when the operator creates the claim. Default: 100Gi.",
        "maxLength": 64,
        "pattern": QUANTITY.pattern,
        "x-kubernetes-int-or-string": True,
    }
    assert set(_schema()["required"]) == {"spec"}
    assert set(_at("spec")["required"]) == {"model", "batching"}


def test_the_schema_prunes_unknown_fields_everywhere() -> None:
    """No object keeps unknown fields: under one, the API server's cost grows exponentially
    with the depth of nested maps (34 s of its CPU for one create); pruned, a request is
    bounded by the schema's sizes. Field validation reports what it drops (docs/api.md)."""
    objects = [(p, n) for p, n in _nodes(_schema()) if "properties" in n]
    assert len(objects) > 40
    kept = [p for p, n in _nodes(_schema()) if "x-kubernetes-preserve-unknown-fields" in n]
    assert kept == []
    for path, node in objects:
        assert node["type"] == "object", path


def test_the_reconciler_cannot_write_a_status_field_the_schema_would_prune() -> None:
    """The status is built with the same models: a misspelled field fails here, not in the
    API server's silent pruning. The stored status reads back leniently."""
    with pytest.raises(ValidationError, match="extra"):
        SpyreModelStatus(phase="Ready", observed_generaton=1)
    with pytest.raises(ValidationError, match="extra"):
        CompileSummary.model_validate({"jobName": "j", "secnds": 1})
    stored = {"phase": "Ready", "fieldOfANewerOperator": 1}
    assert SpyreModelStatus.model_validate(stored, extra="ignore").to_k8s() == {
        "phase": "Ready",
        "conditions": [],
    }


def test_conditions_are_a_map_keyed_by_type() -> None:
    conditions = _at("status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]
    assert _at("status.conditions.[].lastTransitionTime")["format"] == "date-time"


def test_names_subresources_and_printer_columns() -> None:
    crd = build_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "spyremodels.serving.spyre.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["sm"]
    assert spec["names"]["categories"] == ["all", "spyre"]
    version = spec["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Cache"] == '.status.conditions[?(@.type=="CacheReady")].reason'
    assert columns["Ready"] == ".status.readyReplicas"
    assert set(columns) >= {"Phase", "Cache", "Ready", "Endpoint", "Age"}


def test_committed_yaml_parses_to_the_generated_crd() -> None:
    assert yaml.safe_load((ROOT / CRD_FILES[0]).read_text()) == build_crd()
    assert yaml.safe_load((ROOT / CACHE_CRD_FILES[0]).read_text()) == build_cache_crd()


def test_a_spyrecache_takes_a_spyremodel_spec_and_has_the_compile_status() -> None:
    cache = build_cache_crd()
    assert cache["metadata"]["name"] == "spyrecaches.serving.spyre.dev"
    assert cache["spec"]["names"]["shortNames"] == ["scache"]  # "sc" is StorageClass
    (version,) = cache["spec"]["versions"]
    assert version["subresources"] == {"status": {}}  # nothing to scale
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    model = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    spec = {**model["spec"], "properties": dict(model["spec"]["properties"])}
    spec["properties"]["replicas"] = {
        k: v for k, v in spec["properties"]["replicas"].items() if k != "default"
    }
    assert schema["spec"] == spec  # a SpyreModel's spec, copied as it is, is a valid one
    status = set(schema["status"]["properties"])
    assert status == {"observedGeneration", "phase", "conditions", "targetCacheKey", "cache",
                      "weights", "runtime", "usedBy", "compiledAt", "lastUsedAt"}  # fmt: skip


# What stays unbounded in the CRD, and why. Everything else a client sends has a size bound,
# so one object can never make the API server (or the operator) read without end.
UNBOUNDED = {
    ".apiVersion": "checked by the API server itself",
    ".kind": "checked by the API server itself",
}
# status is written by the operator alone (messages clipped in reconcile/conditions.py); a bound
# there could only turn a long value into a failed status write.
UNBOUNDED_UNDER = (".status",)


def test_every_numeric_bound_is_exact_as_the_api_server_reads_it() -> None:
    """The API server reads a schema's minimum and maximum as float64 numbers and compares
    an integer with their int64 conversion: 2**63 - 1 rounds to 2**63, which converts to
    -2**63, and every value is refused (tolerationSeconds was)."""
    bounds = [(path, key, node[key]) for path, node in _nodes(_schema())
              for key in ("minimum", "maximum") if key in node]  # fmt: skip
    inexact = [bound for bound in bounds if abs(bound[2]) > 2**53]
    assert not inexact, inexact


def test_every_string_list_and_map_a_client_sends_is_bounded() -> None:
    unbounded = []
    for path, node in _nodes(_schema()):
        if path in UNBOUNDED or path.startswith(UNBOUNDED_UNDER):
            continue
        text = node.get("type") == "string" or node.get("x-kubernetes-int-or-string")
        if text and "maxLength" not in node and "enum" not in node:
            unbounded.append(f"{path} (string: maxLength)")
        if node.get("type") == "array" and "maxItems" not in node:
            unbounded.append(f"{path} (list: maxItems)")
        if "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(f"{path} (map: maxProperties)")
        free = node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node
        if free:
            unbounded.append(f"{path} (free-form: give it a type)")
    assert not unbounded, f"bound these in api/spec.py (Field(max_length=...)): {unbounded}"


# The most fields a SpyreModel's spec can have (every list and map at its bound). The API
# server's cost of a create grows with the fields its schema checks (5-80 microseconds each
# on the 2-core dev machine: benchmarks/crd_cost.py), and list bounds multiply through
# the nesting (28,000 with 8 terms and requirements and 16 values; 270,000 with 16 terms and
# requirements and 64 values).
SPEC_FIELDS_MOST = 6_500


def most_fields(node: dict[str, Any]) -> int:
    if "properties" in node:
        return 1 + sum(most_fields(sub) for sub in node["properties"].values())
    if "additionalProperties" in node:
        return 1 + node["maxProperties"] * most_fields(node["additionalProperties"])
    if node.get("type") == "array":
        return 1 + node["maxItems"] * most_fields(node["items"])
    return 1


def test_the_largest_spec_has_a_bounded_number_of_fields() -> None:
    spec = _schema()["properties"]["spec"]
    most = most_fields(spec)
    by_field = sorted(((most_fields(sub), name) for name, sub in spec["properties"].items()),
                      reverse=True)  # fmt: skip
    assert most <= SPEC_FIELDS_MOST, f"{most} fields at most; the largest: {by_field[:4]}"
