"""The cache directory's own files: the plugin's catalog and the READY marker.

Every write goes to a temp file in the same directory and is renamed over the target, so a
reader (or a pod killed mid-write) never sees half a file. The catalog is read-modify-write,
so concurrent precompiles of one key serialise on a file lock beside it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import RuntimeConfig, config_differences
from .contract import (
    CATALOG_NAME,
    INDUCTOR_CACHE_SUBDIR,
    INDUCTOR_FILES,
    READY_NAME,
    SPYRE_SERVING_CACHE_KEY,
    SPYRE_SERVING_CACHE_ROOT,
    SPYRE_SERVING_COMPILE_CONFIG,
)
from .inductorcopy import lacking

LOCK_NAME = ".catalog.lock"

log = logging.getLogger(__name__)


def atomic_write_json(path: Path, payload: Any) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes 0600; serving pods may run as another uid and only need to read.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_catalog(cache_dir: Path) -> list[dict[str, Any]]:
    """The catalog's entries; a missing file is empty, anything but a list is an error."""
    path = cache_dir / CATALOG_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    entries = json.loads(text)
    if not isinstance(entries, list):
        raise ValueError(f"{path} is not a JSON list (the plugin only reads lists)")
    return entries


def upsert_catalog_entry(cache_dir: Path, entry: dict[str, Any], timeout: float = 600) -> None:
    """Add `entry`, replacing any entry with the same `data`; other entries are kept."""
    from filelock import FileLock

    with FileLock(str(cache_dir / LOCK_NAME), timeout=timeout):
        try:
            entries = read_catalog(cache_dir)
        except ValueError as e:
            # Only ever written whole by this function, so this is foreign damage; the
            # catalog is derived data that the next precompile of each config rewrites.
            log.warning("replacing an unreadable catalog: %s", e)
            entries = []
        kept = [e for e in entries if not (isinstance(e, dict) and e.get("data") == entry["data"])]
        atomic_write_json(cache_dir / CATALOG_NAME, [*kept, entry])


def write_ready(cache_dir: Path, marker: dict[str, Any]) -> None:
    atomic_write_json(cache_dir / READY_NAME, marker)


@dataclass(frozen=True)
class CacheState:
    """What `serve` found in the cache directory for its key."""

    ready: bool
    summary: str
    differences: list[str] = field(default_factory=list)
    marker: dict[str, Any] | None = None


def check_cache(cfg: RuntimeConfig) -> CacheState:
    """Is the cache for this pod's key READY, and was it compiled for this pod's config?"""
    cache_dir = cfg.cache_dir
    if cache_dir is None:
        unset = f"{SPYRE_SERVING_CACHE_KEY}/{SPYRE_SERVING_CACHE_ROOT} unset"
        return CacheState(False, f"no cache configured ({unset})")
    ready_path = cache_dir / READY_NAME
    try:
        marker = json.loads(ready_path.read_text())
    except FileNotFoundError:
        why = "does not exist" if not cache_dir.is_dir() else "has no READY marker"
        return CacheState(False, f"cache {cache_dir} {why}: it was never precompiled")
    except (OSError, ValueError) as e:
        return CacheState(False, f"{ready_path} is unreadable: {e}")
    if not isinstance(marker, dict):
        return CacheState(False, f"{ready_path} is not a JSON object")
    differences = config_differences(marker.get("cacheKey"), cfg.cache_key, "cacheKey")
    if cfg.compile_config is None:
        differences.append(f"config: this pod has no {SPYRE_SERVING_COMPILE_CONFIG} to compare")
    else:
        differences += config_differences(marker.get("config"), cfg.compile_config)
    if differences:
        return CacheState(
            False,
            f"cache {cache_dir} was compiled for a different configuration: "
            + "; ".join(differences),
            differences,
            marker,
        )
    # READYs written before the manifest have none: nothing to compare
    expected: dict[str, int] = marker.get(INDUCTOR_FILES) or {}
    gone = lacking(expected, cache_dir / INDUCTOR_CACHE_SUBDIR)
    if gone:
        return CacheState(
            False,
            f"cache {cache_dir} lacks {len(gone)} of the {len(expected)} inductor files its "
            f"compile wrote (such as {INDUCTOR_CACHE_SUBDIR}/{gone[0]}): it was changed since",
            [],
            marker,
        )
    return CacheState(True, f"cache {cache_dir} is READY for this configuration", [], marker)
