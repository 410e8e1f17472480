"""The operator's settings (settings.py): one definition each, reached by
flag, environment variable and chart value; one validation, with what to give instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from spyre_operator import settings
from spyre_operator.cli import build_parser
from spyre_operator.cli.run import from_flags
from spyre_operator.settings import Settings, SettingsError, from_env

pytestmark = pytest.mark.unit

PACKAGE = Path(settings.__file__).parents[1]


def parse(*flags: str, environ: dict[str, str] | None = None) -> Settings:
    return from_flags(build_parser().parse_args(["run", *flags]), environ or {})


def test_defaults_read_no_environment() -> None:
    assert parse() == Settings()
    assert Settings().cache_retention_seconds == 7 * 86400
    assert Settings().compile_limits == (4, 0)


def test_a_flag_beats_the_environment_which_beats_the_default() -> None:
    environ = {"SPYRE_OPERATOR_WORKERS": "3", "SPYRE_OPERATOR_MAX_COMPILES": "2"}
    config = parse("--workers", "5", environ=environ)
    assert (config.workers, config.max_compiles, config.resync_seconds) == (5, 2, 300.0)


def test_lists_repeat_as_flags_and_are_comma_separated_in_the_environment() -> None:
    assert parse("-n", "a", "--namespace", "b").namespaces == ("a", "b")
    assert from_env({"SPYRE_OPERATOR_NAMESPACES": "a,b,"}).namespaces == ("a", "b")
    assert from_env({"KUBECONFIG": "/k", "MALLOC_ARENA_MAX": ""}).kubeconfig == "/k"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--workers", "0"], "--workers ($SPYRE_OPERATOR_WORKERS): Input should be greater"),
        (["--max-compiles", "-1"], "--max-compiles ($SPYRE_OPERATOR_MAX_COMPILES)"),
        (["--progress-seconds", "-1"], "--progress-seconds"),
        (["--cache-retention", "7x"], "'7x': use a whole number with a unit, e.g. 7d"),
        (["--metrics-port", "70000"], "--metrics-port ($SPYRE_OPERATOR_METRICS_PORT)"),
        (["--webhook-port", "9443"], "exactly one certificate source"),
    ],
)
def test_a_wrong_value_names_its_flag_and_variable(flags: list[str], said: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(said)):
        parse(*flags)


def test_a_wrong_value_from_the_environment_is_named_too() -> None:
    with pytest.raises(SettingsError, match=r"--platform \(\$SPYRE_OPERATOR_PLATFORM\)"):
        from_env({"SPYRE_OPERATOR_PLATFORM": "gke"})


def test_run_refuses_wrong_settings_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["run", "--cache-retention", "soon"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("spyre-operator run: --cache-retention") and err.count("\n") == 1


def test_every_setting_has_a_flag_or_is_environment_only_and_says_its_default() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for field in Settings.model_fields:
        assert (settings.flag_name(field) in text) != (field == "malloc_arena_max"), field
    assert "default: 300" in text and "$SPYRE_OPERATOR_RESYNC_SECONDS" in text


def environment_reads(source: str) -> list[int]:
    """Lines of `source` that read the environment: any use of os.environ, os.environb or
    os.getenv (a lookup, `in`, a copy, passing it on) or an import of them, but a write
    `os.environ[...] = ...` (run exports the kubeconfig for kopf and the client)."""
    tree = ast.parse(source)
    written = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
    }
    names = {"environ", "environb", "getenv"}

    def reads(node: ast.Attribute | ast.ImportFrom) -> bool:
        if isinstance(node, ast.ImportFrom):
            return node.module == "os" and bool(names & {a.name for a in node.names})
        return id(node) not in written and ast.unparse(node) in {f"os.{n}" for n in names}

    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Attribute, ast.ImportFrom)) and reads(node)
    ]
    return sorted(lines)


def test_the_environment_reads_are_found_in_every_form() -> None:
    source = """import os
from os import getenv
a = os.environ.get("A")
b = "B" in os.environ
c = dict(os.environ)
d = os.getenv("D")
os.environ["E"] = "e"
"""
    assert environment_reads(source) == [2, 3, 4, 5, 6]


def test_no_module_of_the_operator_reads_the_environment_but_the_settings() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if path != Path(settings.__file__)
        for line in environment_reads(path.read_text())
    ]
    assert found == []
