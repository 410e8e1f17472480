"""The weights directories on the cache volume (docs/contract.md, "Model weights").

`<root>/weights/<id>/<commit>/` holds one model at one commit, and counts as ready only
with its manifest `.spyre-weights.json`. It is filled as `.partial-<commit>/` beside it,
verified, given the manifest, then renamed into place: a killed run never leaves a
directory that looks ready. Standard library only (the operator's unit tests import it).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .catalog import atomic_write_json
from .contract import WEIGHTS_DIR, Reason

MANIFEST_NAME = ".spyre-weights.json"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_ID_PART_RE = re.compile(r"^[A-Za-z0-9._-]+$")
# With *.safetensors in a repo, vLLM loads those: the other formats are only disk and time.
OTHER_WEIGHT_FORMATS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")
# Shared directories: other runs (possibly as other uids of the group) add models beside.
SHARED_DIR_MODE = 0o2775
DIR_MODE, FILE_MODE = 0o755, 0o644


class WeightsError(Exception):
    """A failure with its summary reason and a message for the user."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def model_id_problem(model_id: str) -> str | None:
    """Why `model_id` is not a hub id (`org/name` or `name`) safe to use as a path."""
    parts = model_id.split("/")
    if len(parts) > 2:
        return f"{model_id!r} has more than one '/' (expected org/name or name)"
    for part in parts:
        if not _ID_PART_RE.match(part):
            return f"{model_id!r}: {part!r} must be letters, digits, '.', '_' or '-'"
        if part.startswith(("-", ".")) or ".." in part:
            return f"{model_id!r}: {part!r} must not start with '-' or '.' nor contain '..'"
    return None


def is_commit(revision: str) -> bool:
    return COMMIT_RE.match(revision) is not None


def select(paths: Iterable[str]) -> list[str]:
    """The files vLLM needs: with safetensors present, no other weight format nor original/."""
    paths = sorted(paths)
    if not any(p.endswith(".safetensors") for p in paths):
        return paths
    return [
        p
        for p in paths
        if not p.lower().endswith(OTHER_WEIGHT_FORMATS) and not p.startswith("original/")
    ]


def safe_relative(path: str) -> bool:
    """A relative path that stays inside the directory it is joined to."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and "" not in parts and ".." not in parts


@dataclass(frozen=True)
class Expected:
    """A file as the source describes it: its size and one hash (LFS: sha256, else git's)."""

    path: str
    size: int
    sha256: str | None = None
    git_sha1: str | None = None

    def entry(self) -> dict[str, Any]:
        digest = {"sha256": self.sha256} if self.sha256 else {"gitSha1": self.git_sha1}
        return {"size": self.size, **digest}


def digest(path: Path, kind: str, sync: bool = False) -> str:
    """sha256 of the content, or git's blob sha1 (`kind` "gitSha1"); with `sync`, fsyncs
    the file too: it is read whole anyway, and must be on disk before it is published."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % size)
        while chunk := f.read(1 << 20):
            h.update(chunk)
        if sync:
            os.fsync(f.fileno())
    return h.hexdigest()


def verify(directory: Path, expected: Iterable[Expected]) -> None:
    """Each file's size and hash, or WeightsError (ChecksumMismatch for wrong content)."""
    wrong: list[str] = []
    for file in expected:
        path = directory / file.path
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            message = f"{file.path} is missing after the download"
            raise WeightsError("DownloadFailed", message) from None
        if size != file.size:
            wrong.append(f"{file.path}: size expected {file.size}, got {size}")
            continue
        kind, want = ("sha256", file.sha256) if file.sha256 else ("gitSha1", file.git_sha1)
        got = digest(path, kind, sync=True)
        if want is not None and got != want:
            wrong.append(f"{file.path}: {kind} expected {want}, got {got}")
    if wrong:
        raise WeightsError("ChecksumMismatch", "; ".join(wrong))


@dataclass(frozen=True)
class Layout:
    """Where one model's directories are under the cache root."""

    root: Path
    model_id: str

    @property
    def model_dir(self) -> Path:
        return self.root / WEIGHTS_DIR / self.model_id

    def final(self, commit: str) -> Path:
        return self.model_dir / commit

    def partial(self, commit: str) -> Path:
        return self.model_dir / f".partial-{commit}"

    def lock(self, commit: str) -> Path:
        return self.model_dir / f".partial-{commit}.lock"

    def ready(self, commit: str) -> dict[str, Any] | None:
        """The manifest of the commit's directory, if that directory is ready."""
        return read_manifest(self.final(commit))

    def make_dirs(self) -> None:
        """weights/, the org and the model directory, group-writable where created here."""
        path = self.root
        for part in (WEIGHTS_DIR, *self.model_id.split("/")):
            path = path / part
            try:
                path.mkdir()
            except FileExistsError:
                continue
            path.chmod(SHARED_DIR_MODE)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        manifest: dict[str, Any] = json.loads((directory / MANIFEST_NAME).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    return manifest


def tidy(directory: Path, keep: Iterable[str]) -> None:
    """Remove everything but the `keep` files (the downloader's own metadata, leftovers),
    and make what stays readable by the serving pods' group."""
    kept = set(keep)
    for dirpath, dirnames, filenames in os.walk(directory, topdown=False):
        here = Path(dirpath)
        for name in filenames:
            path = here / name
            if path.relative_to(directory).as_posix() in kept:
                path.chmod(FILE_MODE)
            else:
                path.unlink()
        for name in dirnames:
            sub = here / name
            if sub.is_symlink():
                sub.unlink()
            elif not any(sub.iterdir()):
                sub.rmdir()
            else:
                sub.chmod(DIR_MODE)
    directory.chmod(DIR_MODE)


def publish(layout: Layout, commit: str, manifest: dict[str, Any]) -> bool:
    """Write the manifest into the partial directory, then rename it to the commit's name.
    False when a ready directory was already there (the partial one is then discarded)."""
    partial, final = layout.partial(commit), layout.final(commit)
    atomic_write_json(partial / MANIFEST_NAME, manifest)
    try:
        os.rename(partial, final)
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        if layout.ready(commit) is None:
            raise WeightsError(
                "DownloadFailed",
                f"{final} exists without {MANIFEST_NAME} (not written by `spyre-runtime "
                "weights`, or damaged): remove it and run again",
            ) from None
        shutil.rmtree(partial)
        return False
    fd = os.open(layout.model_dir, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)
    return True
