"""Property (issue 18): any value anywhere in an example, and any damage to its YAML text,
gives `validate` an answer (valid, or problems), never an exception, and a bounded one.
Deterministic (the derandomized profile of tests/conftest.py) and bounded, so it runs with the
unit tests."""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from apilib import EXAMPLES, ROOT, load_example
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyre_operator.api.validation import MAX_PROBLEMS, review
from spyre_operator.cli.render import load

sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz_mutants  # its mutation helpers

pytestmark = pytest.mark.unit

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
LINE_LIMIT = 1500

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.text(alphabet="0123456789.eE+-m", max_size=12),  # numbers as strings, quantities
    st.sampled_from(["1e400", "32", "true", "-", "--help", "--max_model_len=1", "9" * 500]),
    st.integers(min_value=1, max_value=5000).map(lambda n: "x" * n),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


DOCS = [load_example(path) for path in EXAMPLES]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """An example with one value replaced, or one new key added, anywhere in it."""
    doc = copy.deepcopy(draw(st.sampled_from(DOCS)))
    path = draw(st.sampled_from(fuzz_mutants.paths(doc)[1:]))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(parent, dict) and draw(st.booleans()):
        parent[draw(st.text(max_size=12))] = draw(values)
    else:
        parent[path[-1]] = draw(values)
    return doc


def _bounded(lines: list[str]) -> None:
    assert all(len(line) < LINE_LIMIT for line in lines), max(lines, key=len)[:300]


@SETTINGS
@given(mutated())
def test_any_value_anywhere_gets_an_answer_never_an_exception(doc: dict[str, Any]) -> None:
    verdict = review(doc)
    assert (verdict.model is None) == bool(verdict.problems)
    assert len(verdict.problems) <= MAX_PROBLEMS + 1
    _bounded([str(p) for p in verdict.problems])


@SETTINGS
@given(
    st.sampled_from(EXAMPLES),
    st.lists(
        st.tuples(
            st.floats(0, 1), st.text(alphabet="{}[]&*:-!|>'\"#\t\n ,?%@`\x00\ufeffa1", max_size=6)
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_damaged_yaml_gets_an_answer_never_an_exception(
    example: Path, edits: list[tuple[float, str]]
) -> None:
    text = example.read_text()
    for where, insert in edits:
        cut = int(where * len(text))
        text = text[:cut] + insert + text[cut:]
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "model.yaml"
        file.write_text(text, encoding="utf-8")
        loaded = load([str(file)], "default")
    _bounded(loaded.errors)
    assert len(loaded.errors) <= MAX_PROBLEMS + 1 or loaded.models == []
