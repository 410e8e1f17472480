"""vLLM's model-info cache, kept with the key and given to each serving pod.

Before it builds its config, vLLM inspects the model's class (which tasks, attention kind,
...) in a subprocess, a new interpreter that imports vLLM, torch and the plugins, and keeps
the answer in `$VLLM_CACHE_ROOT/modelinfos/<class>.json` (checked against a hash of the
class's module, so a file from another vLLM is ignored, not trusted). A pod's HOME is a
fresh emptyDir, so every serving pod paid that subprocess: 13-18 s of a start on the
node (2026-11-26, load 8-9). The compile Job's warmup fills the folder as any start
does; `precompile` keeps its files in the key's directory and `serve` copies them into
the pod's own before vLLM starts.

Only the standard library: `serve` runs this before exec'ing vLLM.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

SUBDIR = "vllm-modelinfos"  # in the key's directory
_VLLM_SUBDIR = "modelinfos"  # in vLLM's cache root


def vllm_folder(environ: Mapping[str, str]) -> Path:
    """Where vLLM keeps its model infos with this env (vllm.envs' VLLM_CACHE_ROOT default)."""
    root = environ.get("VLLM_CACHE_ROOT") or os.path.join(
        environ.get("XDG_CACHE_HOME") or "~/.cache", "vllm"
    )
    home = environ.get("HOME")
    if root.startswith("~") and home:
        root = home + root[1:]
    return Path(os.path.expanduser(root)) / _VLLM_SUBDIR


def _copy(source: Path, target: Path, replace: bool) -> int:
    if not source.is_dir():
        return 0
    copied = 0
    for path in sorted(source.glob("*.json")):
        if (
            path.is_file()
            and not path.is_symlink()
            and (replace or not (target / path.name).exists())
        ):
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / path.name)
            copied += 1
    return copied


def keep(environ: Mapping[str, str], cache_dir: Path) -> int:
    """The compile Job's model infos into the key's directory; how many files."""
    return _copy(vllm_folder(environ), cache_dir / SUBDIR, replace=True)


def give(cache_dir: Path, environ: Mapping[str, str]) -> int:
    """The key's model infos into this pod's vLLM cache (files already there are kept)."""
    return _copy(cache_dir / SUBDIR, vllm_folder(environ), replace=False)
