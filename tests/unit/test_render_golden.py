"""Every example renders to its golden file (env, args and all child objects).

Regenerate after an intended change with:
    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render_golden.py
and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from apilib import EXAMPLES, load_example

from spyre_operator.api.validation import parse
from spyre_operator.render.children import build_children
from spyre_operator.render.yamlio import dump_documents

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_renders_to_its_golden_file(example: Path) -> None:
    rendered = dump_documents(build_children(parse(load_example(example))))
    golden = GOLDEN / example.name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file for {example.name}: run with UPDATE_GOLDEN=1"
    assert rendered == golden.read_text(), f"{golden} differs: review, then UPDATE_GOLDEN=1"


def test_every_golden_file_has_an_example() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.yaml")) == sorted(p.name for p in EXAMPLES)
