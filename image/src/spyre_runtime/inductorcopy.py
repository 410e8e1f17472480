"""A serving pod's own copy of the key's inductor caches: inductor keeps lock files in its
cache and writes there whatever it does not find, and serving pods write nothing under the
key's directory. The copy costs what the compile Job's inductor folder weighs; the pod's
temporary directory (an emptyDir) holds it.

Only the standard library: `serve` runs this before exec'ing vLLM.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .space import tree_bytes

PREFIX = "spyre-inductor-"


@dataclass(frozen=True)
class Copied:
    path: Path  # the private folder, for TORCHINDUCTOR_CACHE_DIR
    files: int
    bytes: int


def private_copy(source: Path | None, parent: Path | None = None) -> Copied:
    """A new folder under `parent` (the temporary directory by default) with the files of
    `source`, if given and there; else empty (inductor then starts with no cache)."""
    target = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    if source is None or not source.is_dir():
        return Copied(target, 0, 0)
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    files = sum(1 for p in target.rglob("*") if p.is_file())
    return Copied(target, files, tree_bytes(target))
