"""docs/install.md's RBAC table says what the chart grants: every resource the chart's roles
name is a row, and each row's verbs are exactly the chart's (no row for a resource the
chart does not grant). The table once missed PodDisruptionBudgets and said "no deletes"."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
from chartlib import render

pytestmark = pytest.mark.chart

INSTALL_MD = Path(__file__).resolve().parents[2] / "docs" / "install.md"
CODE = re.compile(r"`([^`]+)`")


def chart_grants() -> dict[str, set[str]]:
    """Verbs per resource over every Role and ClusterRole the chart renders for the operator,
    in both modes (the endpoint pickers' ClusterRole is the pickers', not the operator's:
    docs/install.md, Routing, says what it grants)."""
    grants: dict[str, set[str]] = defaultdict(set)
    for values in ({}, {"rbac.mode": "namespaced", "watchNamespaces": ["a"]}):
        for doc in render("spyre-system", values):
            picker = doc["metadata"]["name"].endswith("-endpoint-picker")
            if doc["kind"] in ("Role", "ClusterRole") and not picker:
                for rule in doc["rules"]:
                    for resource in rule["resources"]:
                        grants[resource] |= set(rule["verbs"])
    return grants


def docs_table(known: set[str]) -> dict[str, set[str]]:
    """The RBAC table's rows: a row's first cell names resources in backticks (other code
    in it, like a Secret's name, is not a resource), its second the verbs; `a; b` gives
    each resource of the row its own verbs, in order."""
    text = INSTALL_MD.read_text()
    section = text.split("## What the operator may do (RBAC)", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("Resource", "---"):
            continue
        resources = [r for r in CODE.findall(cells[0]) if r in known]
        assert resources, f"an RBAC row names no resource the chart grants: {line}"
        parts = cells[1].split(";")
        for i, resource in enumerate(resources):
            part = parts[i] if len(parts) == len(resources) else cells[1].replace(";", ",")
            verbs = {v.strip() for v in part.split(",")}
            rows[resource] = rows.get(resource, set()) | verbs
    return rows


def test_the_rbac_table_is_what_the_chart_grants() -> None:
    grants = chart_grants()
    table = docs_table(set(grants))
    assert sorted(table) == sorted(grants), "rows and the chart's resources differ"
    for resource, verbs in grants.items():
        assert table[resource] == verbs, f"{resource}: docs {table[resource]}, chart {verbs}"
