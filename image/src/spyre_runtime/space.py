"""Disk space on the cache volume: what a compile wrote, and whether the next one fits.

Only the compile pod sees the volume, so the check runs there, before the warmup: a compile
that fills the volume after an hour fails late and can leave other keys' writers short.
The best estimate of what a compile will write is what an earlier compile of the same model
wrote (READY records its `bytes`); without one, a floor.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
from pathlib import Path

from .contract import READY_NAME

HEADROOM = 1.1  # the same model compiled for other shapes writes about as much
FLOOR_BYTES = 1 << 30  # no earlier compile of the model to go by


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (symlinks not followed; 0 if it is absent)."""
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except FileNotFoundError:  # a writer's temp file renamed meanwhile
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def earlier_bytes(root: Path, model: str, key: str) -> int | None:
    """The most that a ready compile of `model` under `root` (other than `key`) wrote."""
    sizes = []
    for ready in root.glob(f"*/{READY_NAME}"):
        if ready.parent.name == key:
            continue
        try:
            record = json.loads(ready.read_text())
        except (OSError, ValueError):
            continue
        config = record.get("config") if isinstance(record, dict) else None
        if not isinstance(config, dict) or config.get("model") != model:
            continue
        size = record.get("bytes")
        sizes.append(size if isinstance(size, int) else tree_bytes(ready.parent))
    return max(sizes, default=None)


def gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def shortfall(root: Path, key: str, model: str, free: int | None = None) -> str | None:
    """Why the volume cannot hold this compile, or None when it can."""
    earlier = earlier_bytes(root, model, key)
    need = math.ceil(earlier * HEADROOM) if earlier is not None else FLOOR_BYTES
    need -= tree_bytes(root / key)  # a retry keeps what the last attempt wrote
    free = shutil.disk_usage(root).free if free is None else free
    if need <= free:
        return None
    basis = (
        f"an earlier compile of {model} wrote {gb(earlier)}, plus {HEADROOM - 1:.0%}"
        if earlier is not None
        else f"the floor for a model compiled here for the first time is {gb(FLOOR_BYTES)}"
    )
    return (
        f"the cache volume has {gb(free)} free at {root} and this compile needs about "
        f"{gb(need)} ({basis}): give the cache volume more space (spec.cache.volume.size, "
        "or the claim's own size) or remove cache keys no SpyreModel uses"
    )
