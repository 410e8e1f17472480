"""The SpyreModel and SpyreCache CustomResourceDefinitions, generated from the pydantic
models.

pydantic's JSON schema is turned into a pruning structural schema (Kubernetes 1.20+, no
CEL): $refs are inlined, `X | None` becomes an optional X (not nullable: the API server
prunes nulls), `additionalProperties: false` (a model that forbids unknown fields) is left
out, so the API server prunes what the schema does not name, and defaults move into the
descriptions. Nothing in the spec keeps unknown fields (`x-kubernetes-preserve-unknown-
fields`): under such an object the API server's cost grows exponentially with the depth of
nested maps (one create of a SpyreModel nested 20 levels took 34 s of its CPU). Every
string, list and map has a size bound, so a request is bounded in all directions.
Unknown fields are reported the way Kubernetes reports them for any type: server-side
field validation (1.25+; kubectl refuses them by default, `--validate=strict`), kubectl's
client-side validation against the published schema on older servers, and
`spyre-operator validate` offline; the webhook only sees the pruned object (docs/api.md).
The operator applies the defaults when it parses the spec, so a changed default reaches
existing objects and stored objects stay as written.
One exception: `spec.replicas` has its default in the schema too, because the scale
subresource reads the stored field (unset reads as 0: an HPA reports scaling disabled).
Anything the schema cannot express raises, so a new field type is never silently lost.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from spyre_operator.api import names
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.api.status import CACHE_READY, SpyreCacheStatus, SpyreModelStatus

# Where the generated YAML is committed (relative to the repository root), per plural.
CRD_FOLDERS = ("crds", "charts/spyre-operator/crds")


def crd_file(folder: str, plural: str) -> str:
    return f"{folder}/{names.GROUP}_{plural}.yaml"


CRD_FILES = tuple(crd_file(folder, names.PLURAL) for folder in CRD_FOLDERS)
CACHE_CRD_FILES = tuple(crd_file(folder, names.CACHE_PLURAL) for folder in CRD_FOLDERS)

_KEPT = {
    "type",
    "description",
    "required",
    "enum",
    "minimum",
    "maximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "format",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
}
_DROPPED = {"title", "default"}
# Key order in the YAML: what a node is first, its children last.
_RANK = {"type": 0, "description": 1, "required": 8, "properties": 9, "items": 9}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a $ref and collapse `X | None` to X; the field's own keys win."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**target, **rest}, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"a CRD schema cannot express this union: {node['anyOf']}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return _resolve({**branches[0], **rest}, defs)
    return node


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "additionalProperties" and value is False:
            continue  # pruned by the API server; reported by field validation
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
        elif key == "description":
            out[key] = " ".join(value.split())
        elif key in _KEPT:
            out[key] = value
        elif key not in _DROPPED:
            raise ValueError(f"a CRD schema cannot express {key!r} (in {node})")
    default = node.get("default")
    if isinstance(default, str | int | float):  # bool is an int
        shown = str(default).lower() if isinstance(default, bool) else default
        out["description"] = f"{out.get('description', '')} Default: {shown}.".strip()
    return dict(sorted(out.items(), key=lambda kv: (_RANK.get(kv[0], 5), kv[0])))


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a pydantic model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.pop("$defs", {}))


_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Cache",
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{CACHE_READY}")].reason',
    },
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    # of the ready ones, those whose start-up compiled nothing (every graph from the cache)
    {"name": "From-Cache", "type": "integer", "jsonPath": ".status.replicasFromCache"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
    # of those asked for, the ones no node takes: waiting for cards (or CPU, memory)
    {"name": "Unschedulable", "type": "integer", "jsonPath": ".status.unschedulableReplicas"},
    {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint"},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.id", "priority": 1},
    {"name": "Weights", "type": "string", "jsonPath": ".status.weights.state", "priority": 1},
    {"name": "Commit", "type": "string", "jsonPath": ".status.weights.commit", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _with_replicas_default(spec: dict[str, Any]) -> dict[str, Any]:
    spec["properties"]["replicas"]["default"] = SpyreModelSpec.model_fields["replicas"].default
    return spec


def build_crd() -> dict[str, Any]:
    """The SpyreModel CRD, with the scale subresource (HPA, KEDA, kubectl scale)."""
    scale = {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    return _crd(
        kind=names.KIND,
        plural=names.PLURAL,
        singular=names.SINGULAR,
        short_names=names.SHORT_NAMES,
        description="A model served with vLLM on IBM Spyre, from a shared compiled-graph cache.",
        spec=_with_replicas_default(model_schema(SpyreModelSpec)),
        status=model_schema(SpyreModelStatus),
        subresources={"status": {}, "scale": scale},
        columns=_PRINTER_COLUMNS,
    )


_CACHE_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Cache",
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{CACHE_READY}")].reason',
    },
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.id"},
    {"name": "Runtime", "type": "string", "jsonPath": ".status.runtime"},
    {"name": "Bytes", "type": "integer", "jsonPath": ".status.cache.bytes"},
    {"name": "Used-By", "type": "string", "jsonPath": ".status.usedBy"},
    {"name": "Last-Used", "type": "date", "jsonPath": ".status.lastUsedAt"},
    {"name": "Compiled", "type": "date", "jsonPath": ".status.compiledAt", "priority": 1},
    {"name": "Job", "type": "string", "jsonPath": ".status.cache.jobName", "priority": 1},
    {"name": "Key", "type": "string", "jsonPath": ".status.targetCacheKey", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def build_cache_crd() -> dict[str, Any]:
    """The SpyreCache CRD: its spec is a SpyreModel's (the fields that shape the compiled
    graphs are what count; the serving fields are ignored), so a SpyreModel's spec is
    copied as it is to compile its cache ahead."""
    return _crd(
        kind=names.CACHE_KIND,
        plural=names.CACHE_PLURAL,
        singular=names.CACHE_SINGULAR,
        short_names=names.CACHE_SHORT_NAMES,
        description="The compiled-graph cache of one configuration, compiled ahead of any "
        "SpyreModel that needs it.",
        spec=model_schema(SpyreModelSpec),
        status=model_schema(SpyreCacheStatus),
        subresources={"status": {}},
        columns=_CACHE_PRINTER_COLUMNS,
    )


def _crd(
    *,
    kind: str,
    plural: str,
    singular: str,
    short_names: tuple[str, ...],
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    subresources: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    schema = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": f"{names.API_VERSION}."},
            "kind": {"type": "string", "description": f"{kind}."},
            # The API server refuses anything here and explains ObjectMeta itself.
            "metadata": {"type": "object"},
            "spec": spec,
            # Read before the operator's first status write, a new object's generation is
            # ahead of its status: kstatus readers (Flux, kpt) say InProgress, not Current
            # (an object without status is Current to them).
            "status": status | {"default": {"observedGeneration": 0}},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{names.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "spyre-serving"},
        },
        "spec": {
            "group": names.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                # `kubectl get all` / `kubectl get spyre` list them next to their children.
                # (`kubectl delete all --all` then deletes them too, which is what stops
                # the serving: deleting only the children makes the operator recreate them.)
                "categories": ["all", "spyre"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
