"""The limits docs/api.md states are the ones the CRD enforces (generated from the pydantic
models): a number changed in the code and not in the docs fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spyre_operator.api.crd import build_crd

pytestmark = pytest.mark.unit

API_MD = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()


def _spec_field(*path: str) -> dict[str, Any]:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node = schema["properties"]["spec"]
    for name in path:
        node = node["properties"][name]
    return node


@pytest.mark.parametrize(
    ("path", "docs_pattern"),
    [
        (("service", "allowFrom"), r"`service\.allowFrom`: 1 to (\d+) peers"),
        (
            ("topologySpreadConstraints",),
            r"`topologySpreadConstraints`: one per\s+"
            r"`topologyKey` and `whenUnsatisfiable`, at most (\d+);",
        ),
    ],
)
def test_docs_state_the_crds_item_limits(path: tuple[str, ...], docs_pattern: str) -> None:
    found = re.search(docs_pattern, API_MD)
    assert found, f"docs/api.md no longer says {docs_pattern!r}"
    assert int(found.group(1)) == _spec_field(*path)["maxItems"], ".".join(path)
