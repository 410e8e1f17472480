"""What benchmarks/crd_cost.py posts: SpyreModel specs nested, oversized and with every
list at the CRD's bounds, the CRD as it was before the pruning schema, and the yardsticks
of a create's size (a `Flat`, a ConfigMap, a Deployment, a `Placement`)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from spyre_operator.api.crd import build_crd
from spyre_operator.api.names import API_VERSION, KIND

# The yardstick's kind: a custom resource whose schema is one string.
FLAT_GROUP = "crd-cost.example.com"
FLAT_API = f"{FLAT_GROUP}/v1"
FLAT_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"flats.{FLAT_GROUP}"},
    "spec": {
        "group": FLAT_GROUP,
        "names": {"kind": "Flat", "plural": "flats", "singular": "flat", "listKind": "FlatList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"data": {"type": "string"}}}
                        },
                    }
                },
            }
        ],
    },
}
PLAIN: dict[str, Any] = {
    "model": {"id": "ibm-granite/granite-3.3-8b-instruct"},
    "batching": {"continuous": {"maxModelLen": 8192, "maxNumSeqs": 4}},
}


def nested(depth: int) -> dict[str, Any]:
    deep: dict[str, Any] = {"leaf": "x"}
    for i in range(depth):
        deep = {f"n{i % 3}": deep, "x": i}  # two keys a level, as a patient attacker writes
    return deep


def bound(path: str, key: str = "maxItems") -> int:
    """A size bound of the SpyreModel CRD's spec, by its dotted path ([] an item)."""
    node = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return int(node[key])


def affinity(terms: int, requirements: int, values: int) -> dict[str, Any]:
    """spec.affinity with every list of terms at `terms`, of requirements at `requirements`
    and of values at `values`, each value one character: the most fields the schema checks
    per byte (the node terms' matchFields left out: Kubernetes takes one metadata.name
    there)."""
    requirement = {"key": "k", "operator": "In", "values": ["v"] * values}
    node_terms = [{"matchExpressions": [requirement] * requirements}] * terms
    label_selector = {"matchExpressions": [requirement] * requirements}
    pod_term = {
        "topologyKey": "z",
        "labelSelector": label_selector,
        "namespaceSelector": label_selector,
    }
    pods = {
        "requiredDuringSchedulingIgnoredDuringExecution": [pod_term] * terms,
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": pod_term}
        ]
        * terms,
    }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": t} for t in node_terms
            ],
        },
        "podAffinity": pods,
        "podAntiAffinity": pods,
    }


def affinity_at_bounds() -> dict[str, Any]:
    """spec.affinity with every list at the CRD's maxItems."""
    node = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = f"{node}.nodeSelectorTerms"
    expressions = f"{terms}.[].matchExpressions"
    return affinity(bound(terms), bound(expressions), bound(f"{expressions}.[].values"))


def selector_at_bounds(path: str) -> dict[str, Any]:
    """The label selector at `path` with its requirements, values and matchLabels at
    their bounds."""
    values = bound(f"{path}.matchExpressions.[].values")
    requirement = {"key": "k", "operator": "In", "values": ["v"] * values}
    return {
        "matchLabels": {f"l{i}": "v" for i in range(bound(f"{path}.matchLabels", "maxProperties"))},
        "matchExpressions": [requirement] * bound(f"{path}.matchExpressions"),
    }


def largest_spec() -> dict[str, Any]:
    """The SpyreModel spec with the most fields the schema checks that `validate` takes:
    every list and map of objects at its bound (the affinity as affinity_at_bounds, with
    its pod terms' namespaces and label keys; the spread constraints, tolerations, env,
    allowFrom peers, the compile pods' placement, labels and annotations), each value
    short."""
    at = affinity_at_bounds()
    pod = "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.[]"
    keys = bound(f"{pod}.matchLabelKeys")
    term = {
        "topologyKey": "z",
        "labelSelector": selector_at_bounds(f"{pod}.labelSelector"),
        "namespaceSelector": selector_at_bounds(f"{pod}.namespaceSelector"),
        "namespaces": [f"n{i}" for i in range(bound(f"{pod}.namespaces"))],
        "matchLabelKeys": [f"m{i}" for i in range(keys)],
        "mismatchLabelKeys": [f"x{i}" for i in range(bound(f"{pod}.mismatchLabelKeys"))],
    }
    for side in ("podAffinity", "podAntiAffinity"):
        terms = at[side]
        terms["requiredDuringSchedulingIgnoredDuringExecution"] = [term] * len(
            terms["requiredDuringSchedulingIgnoredDuringExecution"]
        )
        terms["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "podAffinityTerm": term}
        ] * len(terms["preferredDuringSchedulingIgnoredDuringExecution"])
    spread = "topologySpreadConstraints.[]"
    spreads = [
        {
            "maxSkew": 1,
            "topologyKey": f"z{i}",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector_at_bounds(f"{spread}.labelSelector"),
            "minDomains": 1,
            "matchLabelKeys": [f"m{i}" for i in range(bound(f"{spread}.matchLabelKeys"))],
            "nodeAffinityPolicy": "Honor",
            "nodeTaintsPolicy": "Honor",
        }
        for i in range(bound("topologySpreadConstraints"))
    ]
    peer = "service.allowFrom.[]"
    peers = [
        {
            "namespaceSelector": selector_at_bounds(f"{peer}.namespaceSelector"),
            "podSelector": selector_at_bounds(f"{peer}.podSelector"),
        }
    ] * bound("service.allowFrom")
    toleration = {
        "key": "t",
        "operator": "Equal",
        "value": "v",
        "effect": "NoExecute",
        "tolerationSeconds": 1,
    }
    secret = {"secretKeyRef": {"name": "s", "key": "k", "optional": True}}
    labels = {f"l{i}": "v" for i in range(bound("podLabels", "maxProperties"))}
    return PLAIN | {
        "affinity": at,
        "topologySpreadConstraints": spreads,
        "service": {"allowFrom": peers},
        "tolerations": [toleration] * bound("tolerations"),
        "cache": {
            "compile": {"nodeSelector": labels, "tolerations": [toleration] * bound("tolerations")}
        },
        "env": [{"name": f"E{i}", "valueFrom": secret} for i in range(bound("env"))],
        "extraArgs": ["a"] * bound("extraArgs"),
        "imagePullSecrets": [{"name": f"s{i}"} for i in range(bound("imagePullSecrets"))],
        "nodeSelector": labels,
        "podLabels": labels,
        "podAnnotations": labels,
    }


REQUEST_LIMIT = 3 * 1024 * 1024  # the API server's, of a JSON body
STORED_MOST = 3 * 1024 * 1024 // 2  # etcd's request limit: what a stored object can take


def at_the_limit() -> dict[str, Any]:
    """The worst a client can post: the affinity at its bounds (the most fields the schema
    checks), and unknown keys (decoded, then pruned) up to just below the request limit."""
    spec = PLAIN | {"affinity": affinity_at_bounds()}
    room = REQUEST_LIMIT - 50_000 - len(json.dumps(document("c00-000", spec)))
    return spec | {f"u{i:07d}": 0 for i in range(room // len('"u0000000": 0, '))}


LARGEST = "every list of the spec at its bound"


def cases(depth: int) -> dict[str, tuple[Callable[[], dict[str, Any]], str | None]]:
    """name -> (its spec, why it is not posted to the schema that keeps unknown fields)."""
    return {
        "plain": (lambda: PLAIN, None),
        f"maps {depth} deep in resources": (
            lambda: PLAIN | {"resources": {"limits": {"cpu": "1"}, "extra": nested(depth)}},
            None,
        ),
        f"maps {depth} deep in a toleration": (
            lambda: PLAIN | {"tolerations": [{"operator": "Exists", "x": nested(depth)}]},
            None,
        ),
        f"maps {depth} deep in rollout": (
            lambda: PLAIN | {"rollout": {"maxSurge": 1, "extra": nested(depth)}},
            None,
        ),
        "maps 200 deep in resources": (
            lambda: PLAIN | {"resources": {"extra": nested(200)}},
            "the cost grows exponentially with the depth",
        ),
        "60,000 unknown keys": (lambda: PLAIN | {f"k{i}": i for i in range(60_000)}, None),
        "1 MB of env values at their bound": (
            lambda: (
                PLAIN
                | {
                    "env": [{"name": f"E{i}", "value": "v" * 32768} for i in range(30)],
                    "rollout": {"maxSurge": "100%", "maxUnavailable": 100_000},
                    "cache": {"compile": {"minServingReplicas": 1000}},
                }
            ),
            None,
        ),
        "affinity lists at their bounds": (
            lambda: PLAIN | {"affinity": affinity_at_bounds()},
            None,
        ),
        LARGEST: (largest_spec, None),
        "the affinity + unknown keys to 3 MiB": (
            at_the_limit,
            "kept, 3 MiB is beyond etcd's limit (1.5 MiB)",
        ),
    }


def kept_unknown(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as it was before issue 31: every object of the spec but affinity (and the
    status) kept unknown fields for the webhook to name."""
    old = copy.deepcopy(crd)
    schema = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def keep(node: dict[str, Any], path: str) -> None:
        if path.endswith(".affinity"):
            return
        if "properties" in node:
            node["x-kubernetes-preserve-unknown-fields"] = True
            for name, sub in node["properties"].items():
                keep(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            keep(node["items"], path)

    keep(schema, "spec")
    return old


def document(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def flat(name: str, size: int) -> dict[str, Any]:
    """A Flat of `size` bytes as JSON, all in its one string: what any custom resource that
    large costs."""
    body: dict[str, Any] = {"apiVersion": FLAT_API, "kind": "Flat", "metadata": {"name": name}}
    body["spec"] = {"data": "x" * max(0, size - len(json.dumps(body)) - 22)}
    return body


def config_map(name: str, size: int) -> dict[str, Any]:
    """A ConfigMap of `size` bytes as JSON, all in one value: what a core kind that large
    costs (above its 1 MiB of data it is decoded, then refused by validation)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    body["data"] = {"d": "x" * max(0, size - len(json.dumps(body)) - 14)}
    return body


def deployment(name: str, affinity: dict[str, Any]) -> dict[str, Any]:
    """A Deployment whose pods carry `affinity`: Kubernetes' own decoding and validation
    of the same fields (no controller runs: it is only stored)."""
    labels = {"app": "crd-cost"}
    pod = {"containers": [{"name": "c", "image": "i"}], "affinity": affinity}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def fields(value: Any) -> int:
    """The JSON nodes of a value (a map, a list and each scalar count one)."""
    if isinstance(value, dict):
        return 1 + sum(fields(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(fields(v) for v in value)
    return 1


def same_as_flat(body: dict[str, Any]) -> dict[str, Any]:
    """The same spec posted as a Flat (pruned to nothing there: decoded, not stored)."""
    return body | {"apiVersion": FLAT_API, "kind": "Flat"}


# The affinity's lists (terms, requirements, values), from one of each to beyond the CRD's
# bounds (4, 4, 8; 8, 8, 16 before): how the API server's cost grows with the fields its
# schema checks.
GROWTH = ((1, 1, 1), (2, 2, 4), (4, 4, 8), (8, 8, 16), (16, 16, 16))


def unbounded(node: Any) -> Any:
    """A schema without its maxItems and maxProperties."""
    if isinstance(node, dict):
        return {k: unbounded(v) for k, v in node.items() if k not in ("maxItems", "maxProperties")}
    return node


def placement_crd() -> dict[str, Any]:
    """A custom resource whose spec is the SpyreModel's affinity without its list bounds:
    the same checks on as many fields as asked."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    crd = copy.deepcopy(FLAT_CRD)
    crd["metadata"]["name"] = f"placements.{FLAT_GROUP}"
    crd["spec"]["names"] = {
        "kind": "Placement",
        "plural": "placements",
        "singular": "placement",
        "listKind": "PlacementList",
    }
    (version,) = crd["spec"]["versions"]
    placed = unbounded(spec["properties"]["affinity"])
    version["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
        "type": "object",
        "properties": {"affinity": placed},
    }
    return crd


def placement(name: str, placed: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": FLAT_API,
        "kind": "Placement",
        "metadata": {"name": name},
        "spec": {"affinity": placed},
    }
