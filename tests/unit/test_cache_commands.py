"""`spyre-operator cache`: what it refuses before any registry is asked (the registry's
side: tests/integration/test_cache_registry.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spyre_operator.cli import main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["ls", "https://r.example/x"], "'https://r.example/x' is not a repository"),
        (["pull", "r.example/x", "/v", "abc"], "'abc' is not a cache key (64 lowercase hex"),
        (["push", "r.example/x"], "the following arguments are required: root"),
    ],
)
def test_wrong_arguments_are_named(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cache", *args])
    assert exited.value.code == 2 and said in capsys.readouterr().err


def test_a_push_of_a_volume_without_a_ready_key_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ("a" * 64)).mkdir()  # a compile that never finished: no READY
    assert main(["cache", "push", "127.0.0.1:9/x", str(tmp_path)]) == 1
    assert f"{tmp_path} holds no ready key (<key>/READY) to push" in capsys.readouterr().err
