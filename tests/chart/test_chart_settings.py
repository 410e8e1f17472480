"""The chart's `operator:` values are the operator's settings (settings.py):
the same names, defaults and bounds; `spyre-operator crd --write` derives the schema."""

from __future__ import annotations

import json

import pytest
import yaml
from chartlib import CHART

from spyre_operator import settings
from spyre_operator.cli.render import chart_values_schema
from spyre_operator.settings import Settings

pytestmark = pytest.mark.chart


def test_the_charts_defaults_are_the_operators() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]
    fields = settings.chart_fields()
    assert set(values) == {"logLevel", *fields}
    for name, field in fields.items():
        assert values[name] == Settings.model_fields[field].default, name


def test_the_charts_schema_of_the_settings_is_derived_from_them() -> None:
    text = (CHART / "values.schema.json").read_text()
    assert chart_values_schema(text) == text, "run `spyre-operator crd --write`"
    section = json.loads(text)["properties"]["operator"]["properties"]
    assert section["workers"]["minimum"] == 1
    assert section["platform"]["enum"] == ["kubernetes", "openshift"]
