"""Every example renders to its golden file: every object exactly as the operator writes
it (env, args, ownerReferences, the applied-hash annotation).

Regenerate after an intended change with:
    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render_golden.py
and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from apilib import COMMIT, EXAMPLES, load_example

from spyre_operator.api.validation import parse
from spyre_operator.render.children import desired
from spyre_operator.render.weights_job import is_commit
from spyre_operator.render.yamlio import dump_documents

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
UID = "00000000-0000-4000-8000-000000000000"  # of the SpyreModel, for ownerReferences


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_renders_to_its_golden_file(example: Path) -> None:
    """A hub model's revision that is not a commit is rendered as resolved to COMMIT."""
    model = parse(load_example(example))
    commit = None if is_commit(model.spec.model.revision) else COMMIT
    rendered = dump_documents(desired(model, UID, commit=commit).objects())
    golden = GOLDEN / example.name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file for {example.name}: run with UPDATE_GOLDEN=1"
    assert rendered == golden.read_text(), f"{golden} differs: review, then UPDATE_GOLDEN=1"


def test_every_golden_file_has_an_example() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.yaml")) == sorted(p.name for p in EXAMPLES)
