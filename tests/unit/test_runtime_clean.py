"""`spyre-runtime clean`: removes one key's directory and nothing else, and says why not
when the path is not a key directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spyre_runtime.catalog import upsert_catalog_entry, write_ready
from spyre_runtime.clean import REMOVING, Refused, remove_key
from spyre_runtime.cli import main

pytestmark = pytest.mark.unit

KEY, OTHER = "a" * 64, "b" * 64


def compiled(root: Path, key: str, size: int) -> Path:
    """A key directory as a compile leaves it: graphs, the catalog, READY."""
    path = root / key
    (path / "inductor").mkdir(parents=True)
    (path / "inductor" / "graph.bin").write_bytes(b"x" * size)
    upsert_catalog_entry(path, {"data": {"MODEL_NAME": key[:4]}})
    write_ready(path, {"cacheKey": key})
    return path


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_clean_removes_only_its_key_and_says_the_bytes(tmp_path: Path) -> None:
    root, log = tmp_path / "cache", tmp_path / "termination-log"
    compiled(root, KEY, 1000)
    compiled(root, OTHER, 10)
    (root / "weights" / "m").mkdir(parents=True)
    before = files(root)
    env = {"SPYRE_SERVING_CACHE_ROOT": str(root), "SPYRE_SERVING_CACHE_KEY": KEY}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in (env | {"SPYRE_SERVING_TERMINATION_LOG": str(log)}).items():
            mp.setenv(name, value)
        assert main(["clean"]) == 0
    said = json.loads(log.read_text())
    assert said["ok"] is True and said["cacheKey"] == KEY
    assert said["bytes"] > 1000  # the graphs, the catalog and READY
    assert files(root) == [p for p in before if not p.startswith(KEY)]
    assert remove_key(root, KEY) == 0  # a rerun (the Job's retry) finds it gone: fine


def test_a_crash_half_way_is_finished_by_the_next_run(tmp_path: Path) -> None:
    compiled(tmp_path, KEY, 100)
    (tmp_path / KEY).rename(tmp_path / f"{REMOVING}{KEY}")  # renamed, then killed
    assert remove_key(tmp_path, KEY) > 100
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("make", "key", "why"),
    [
        (lambda root: (root / "weights").mkdir(), "weights", "not a cache key"),
        (lambda root: (root / "x").mkdir(), "../" + KEY, "not a cache key"),
        (lambda root: (root / KEY).write_text("x"), KEY, "not a directory"),
        (lambda root: (root / KEY).symlink_to(root.parent / "elsewhere"), KEY, "symlink"),
    ],
)
def test_clean_refuses_what_is_not_a_key_directory(
    tmp_path: Path, make: object, key: str, why: str
) -> None:
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    root.mkdir()
    compiled(elsewhere, "c" * 64, 10)
    make(root)  # type: ignore[operator]
    before = files(tmp_path)
    with pytest.raises(Refused, match=why):
        remove_key(root, key)
    assert files(tmp_path) == before


def test_a_refusal_is_a_failed_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log"
    monkeypatch.setenv("SPYRE_SERVING_CACHE_ROOT", "relative/root")
    monkeypatch.setenv("SPYRE_SERVING_CACHE_KEY", KEY)
    monkeypatch.setenv("SPYRE_SERVING_TERMINATION_LOG", str(log))
    assert main(["clean"]) == 2
    said = json.loads(log.read_text())
    assert (said["ok"], said["reason"]) == (False, "InvalidConfig")
    assert "not an absolute path" in said["message"]
    assert main(["clean", "--key", KEY]) == 2
