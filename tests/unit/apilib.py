"""Helpers of the API unit tests: the examples and a small valid SpyreModel to vary."""

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
