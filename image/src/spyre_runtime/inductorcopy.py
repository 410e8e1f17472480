"""The key's inductor cache as serving pods use it: what the compile wrote (READY keeps a
manifest, so a cache emptied or cut short since is seen before vLLM starts), and each
pod's own copy of it. inductor keeps lock files in its cache and writes there whatever it
does not find, and serving pods write nothing under the key's directory: the copy costs
what the compile Job's inductor folder weighs, in the pod's temporary directory (an
emptyDir).

Only the standard library: `serve` runs this before exec'ing vLLM.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .space import tree_bytes

PREFIX = "spyre-inductor-"


def manifest(folder: Path) -> dict[str, int]:
    """Every regular file under `folder` (relative path -> size); empty if it is absent."""
    found: dict[str, int] = {}
    for top, _, names in os.walk(folder):
        for name in names:
            path = Path(top, name)
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(folder))] = path.stat().st_size
    return found


def lacking(expected: dict[str, int], folder: Path) -> list[str]:
    """The files of `expected` that `folder` lacks or holds with another size, sorted
    (files added since do not matter: another compile of the key may add some)."""
    return sorted(
        name
        for name, size in expected.items()
        if not (folder / name).is_file() or (folder / name).stat().st_size != size
    )


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
    return Copied(target, len(manifest(target)), tree_bytes(target))
