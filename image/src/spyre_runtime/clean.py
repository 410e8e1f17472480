"""`clean`: remove one cache key's directory from the cache volume (the clean-up Job).

Only `<root>/<key>` goes, and only when it is what a compile makes: a real directory (not a
symlink) directly under the cache root, named by a cache key (64 hex digits). Its catalog
and READY marker live inside it, so no other key's files are touched. The directory is first
renamed out of the key's name, in one step: a pod looking for the key finds it whole or
not at all, and a crash half-way leaves a `.removing-` directory that the next run removes.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from .contract import SPYRE_SERVING_CACHE_KEY, SPYRE_SERVING_CACHE_ROOT, Summary
from .report import failure, log, termination_log, write_summary
from .space import tree_bytes

KEY = re.compile(r"^[0-9a-f]{64}$")  # sha256 hex: the operator's cache keys
REMOVING = ".removing-"


class Refused(Exception):
    """The path is not a key directory this command may remove."""


def key_dir(root: Path, key: str) -> Path | None:
    """`<root>/<key>`, checked; None when it is not there (already removed)."""
    if not KEY.match(key):
        raise Refused(f"{key!r} is not a cache key (64 hex digits)")
    if not root.is_absolute() or not root.is_dir():
        raise Refused(f"cache root {root} is not an absolute path to a directory")
    path = root / key
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode):
        raise Refused(f"{path} is a symlink, not a key directory: left alone")
    if not stat.S_ISDIR(mode):
        raise Refused(f"{path} is not a directory: left alone")
    if path.resolve().parent != root.resolve():
        raise Refused(f"{path} is not directly under the cache root {root}")
    return path


def remove_key(root: Path, key: str) -> int:
    """Remove the key's directory (and a previous run's leftover); the bytes freed."""
    path = key_dir(root, key)
    leftover = root / f"{REMOVING}{key}"
    if path is not None:
        if leftover.exists():
            shutil.rmtree(leftover)
        os.rename(path, leftover)  # the key is gone at once; its files follow
    if not leftover.is_dir() or leftover.is_symlink():
        return 0
    freed = tree_bytes(leftover)
    shutil.rmtree(leftover)  # never follows symlinks inside
    return freed


def clean(environ: Mapping[str, str]) -> int:
    root = Path(environ.get(SPYRE_SERVING_CACHE_ROOT, ""))
    key = environ.get(SPYRE_SERVING_CACHE_KEY, "")
    started = time.monotonic()
    summary: Summary
    try:
        freed = remove_key(root, key)
    except Refused as e:
        log.error("clean refused: %s", e)
        summary = failure("InvalidConfig", str(e))
        summary["cacheKey"] = key or None
        write_summary(termination_log(environ), summary)
        return 2
    log.info("removed %s/%s: %d bytes freed", root, key, freed)
    seconds = round(time.monotonic() - started, 1)
    summary = {"ok": True, "cacheKey": key, "bytes": freed, "seconds": seconds}
    write_summary(termination_log(environ), summary)
    return 0
