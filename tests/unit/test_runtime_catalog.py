"""The catalog writer/reader and the READY marker, including concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from contractlib import contract_env
from spyre_runtime.catalog import (
    CATALOG_NAME,
    READY_NAME,
    atomic_write_json,
    check_cache,
    read_catalog,
    upsert_catalog_entry,
    write_ready,
)
from spyre_runtime.config import from_env

pytestmark = pytest.mark.unit

CONFIG = {"model": "/m", "maxModelLen": 256}


def entry(model: str, version: str = "1.10.0", tp: int = 1) -> dict[str, Any]:
    data = {"MODEL_NAME": model, "NUM_AIUS": tp, "VLLM_DT_MAX_CONTEXT_LEN": 256}
    return {"vllm_spyre_version": version, "data": data}


def test_upsert_adds_replaces_and_keeps(tmp_path: Path) -> None:
    assert read_catalog(tmp_path) == []
    upsert_catalog_entry(tmp_path, entry("a"))
    upsert_catalog_entry(tmp_path, entry("b"))
    upsert_catalog_entry(tmp_path, entry("a", version="1.10.1"))
    assert read_catalog(tmp_path) == [entry("b"), entry("a", version="1.10.1")]
    assert json.loads((tmp_path / CATALOG_NAME).read_text()) == read_catalog(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".catalog.lock", CATALOG_NAME]


def test_a_damaged_catalog_is_rewritten_as_a_list(tmp_path: Path) -> None:
    (tmp_path / CATALOG_NAME).write_text("{}")
    with pytest.raises(ValueError, match="not a JSON list"):
        read_catalog(tmp_path)
    upsert_catalog_entry(tmp_path, entry("a"))
    assert read_catalog(tmp_path) == [entry("a")]


def _upsert_many(cache_dir: str, worker: int) -> None:
    for i in range(15):
        # every worker also rewrites the shared entry, which must end up there exactly once
        upsert_catalog_entry(Path(cache_dir), entry(f"w{worker}-{i}"))
        upsert_catalog_entry(Path(cache_dir), entry("shared", version=f"{worker}"))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_upsert_many, args=(str(tmp_path), w)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=120)
        assert p.exitcode == 0
    models = [e["data"]["MODEL_NAME"] for e in read_catalog(tmp_path)]
    assert sorted(models) == sorted([f"w{w}-{i}" for w in range(4) for i in range(15)] + ["shared"])
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _rewrite_ready(cache_dir: str, rounds: int) -> None:
    for i in range(rounds):
        write_ready(Path(cache_dir), {"round": i, "padding": "x" * 200_000})


def test_ready_readers_never_see_half_a_file(tmp_path: Path) -> None:
    write_ready(tmp_path, {"round": -1})
    writer = multiprocessing.get_context("spawn").Process(
        target=_rewrite_ready, args=(str(tmp_path), 60)
    )
    writer.start()
    reads = 0
    while writer.is_alive() or reads == 0:
        marker = json.loads((tmp_path / READY_NAME).read_text())  # raises on a torn file
        assert isinstance(marker["round"], int)
        reads += 1
    writer.join(timeout=60)
    assert writer.exitcode == 0
    assert json.loads((tmp_path / READY_NAME).read_text())["round"] == 59


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / READY_NAME
    atomic_write_json(target, {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"ok": object()})
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == [READY_NAME]
    assert target.stat().st_mode & 0o777 == 0o644


def _cfg(tmp_path: Path, config: dict[str, Any], key: str | None = None) -> Any:
    env = contract_env("vllm-spyre", tmp_path, config, tmp_path / "t", key=key)
    return from_env(env, ["/m"])


def test_cache_states(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, CONFIG)
    state = check_cache(cfg)
    assert not state.ready and "does not exist: it was never precompiled" in state.summary
    cfg.cache_dir.mkdir()
    assert "has no READY marker" in check_cache(cfg).summary
    (cfg.cache_dir / READY_NAME).write_text("{")
    assert "is unreadable" in check_cache(cfg).summary
    write_ready(cfg.cache_dir, {"cacheKey": cfg.cache_key, "config": CONFIG})
    assert check_cache(cfg).ready


def test_a_different_config_is_named_field_by_field(tmp_path: Path) -> None:
    ready = _cfg(tmp_path, CONFIG)
    ready.cache_dir.mkdir()
    write_ready(ready.cache_dir, {"cacheKey": ready.cache_key, "config": CONFIG})
    # Same key directory, other config: what a changed spec with a stale key would look like.
    pod = _cfg(tmp_path, {"model": "/m", "maxModelLen": 512}, key=ready.cache_key)
    state = check_cache(pod)
    assert not state.ready
    assert state.differences == ["maxModelLen: READY has 256, this pod has 512"]
    assert "compiled for a different configuration: maxModelLen" in state.summary
