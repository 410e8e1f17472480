"""Helpers of the API unit tests: the examples, a small valid SpyreModel to vary, and the
hostile inputs (also timed by benchmarks/hostile_bench.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from spyre_operator.api.names import API_VERSION, KIND

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

BASE: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": KIND,
    "metadata": {"name": "demo", "namespace": "ns"},
    "spec": {
        "model": {"id": "ibm-granite/granite-3.3-8b-instruct"},
        "batching": {"continuous": {"maxModelLen": 8192, "maxNumSeqs": 4}},
    },
}


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge patch into a copy of base; a None value deletes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def with_spec(patch: dict[str, Any]) -> dict[str, Any]:
    """BASE with `patch` merged into its spec."""
    return merge(BASE, {"spec": patch})


def load_example(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def example(stem: str) -> dict[str, Any]:
    """An example by file stem, e.g. example("micro-granite-cpu")."""
    return load_example(ROOT / "examples" / f"{stem}.yaml")


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def pinned(doc: dict[str, Any]) -> dict[str, Any]:
    """A hub model as its compile and serving pods see it once the weights Job resolved the
    revision (to COMMIT); other sources as they are."""
    source = doc["spec"]["model"].get("source") or {}
    if "pvc" in source or "hostPath" in source:
        return doc
    return merge(doc, {"spec": {"model": {"revision": COMMIT}}})


# A core/v1 Affinity using every part of the type (valid, as Kubernetes checks it).
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "cards", "operator": "Gt", "values": ["3"]}]}
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
            ]}}
        ],
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "x"}},
                "namespaces": ["ai"],
                "topologyKey": "kubernetes.io/hostname",
            }}
        ]
    },
}  # fmt: skip


# Documents that break naive YAML handling, each with what `validate` and `render` say.
HOSTILE_YAML = {
    "nested 600 deep": (
        "spec:\n  affinity: " + "[" * 600 + "]" * 600 + "\n",
        'invalid YAML: nested more than 100 levels deep: a SpyreModel needs far fewer in "',
    ),
    "an integer of 5000 digits": (
        "spec:\n  replicas: " + "9" * 5000 + "\n",
        "invalid YAML: a number of 5000 characters: Kubernetes numbers have at most 19 digits",
    ),
    "an alias bomb": (
        "spec:\n  nodeSelector:\n    a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"    {c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + "    j: [*i, *i, *i, *i, *i, *i, *i, *i, *i]\n",
        "invalid YAML: aliases expand this document by 4412961486 nodes (it has 34): write the "
        "repeated parts out, or use fewer aliases",
    ),
    "an alias inside itself": ("spec: &a {x: *a}\n", "an alias refers to a node that contains it"),
    "a date that is none": ("metadata: {namespace: 2001-13-45}\n", "month must be in 1..12 in"),
    "a tag that lies": ("spec: {replicas: !!int many}\n", "invalid literal for int()"),
}

# Image references that backtrack a naive reference pattern for a very long time.
IMAGE_REFERENCES = ["a" * 512, "a-" * 255 + "a", "a" + "_-" * 255, "a/" * 255 + "!"]


def alias_bomb() -> Any:
    """What YAML aliases build: 9**10 leaves if written out, 10 lists in memory."""
    bomb: Any = ["x"] * 9
    for _ in range(9):
        bomb = [bomb] * 9
    return bomb
