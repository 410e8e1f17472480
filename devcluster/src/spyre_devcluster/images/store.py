"""Built images in the cache folder, keyed by their inputs.

`$SPYRE_SERVING_CACHE/images/<slug>/<key>/` holds `image.json` (name, layers, config)
and the image's own layer tree(s). A layer is a directory laid out as the image's `/`; its
digest comes from one hash pass when it is made and is stored beside it, so importing
never hashes a multi-GB layer again. A finished entry is renamed into place, so a
half-built one never counts; older keys of the same slug are removed after a new build.
Host trees (a Python, a venv) enter a layer as hard-link copies: no extra disk, and the
layer stays as it was hashed even if the host tree changes later.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spyre_devcluster.binaries import cache_root
from spyre_devcluster.images.oci import Blob, ImageConfig, Manifest, measure_layer

REGISTRY = "localhost/spyre-serving"
# Bump when what the builder writes changes: every cached image is then rebuilt.
BUILDER_REV = "2"


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and what to do."""


def images_root() -> Path:
    """$SPYRE_SERVING_IMAGES, default <cache>/images (the benchmark points it elsewhere to
    build from nothing while the runtime venvs stay in the cache)."""
    return Path(os.environ.get("SPYRE_SERVING_IMAGES", cache_root() / "images"))


def inputs_key(inputs: dict[str, object]) -> str:
    doc = json.dumps({"builder": BUILDER_REV, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()


@dataclass(frozen=True)
class Layer:
    dir: Path
    blob: Blob


@dataclass(frozen=True)
class Image:
    name: str
    key: str
    layers: tuple[Layer, ...]
    config: ImageConfig
    architecture: str = "amd64"

    @property
    def manifest(self) -> Manifest:
        blobs = tuple(layer.blob for layer in self.layers)
        return Manifest(self.name, self.config, blobs, self.architecture)

    @property
    def size(self) -> int:
        return sum(layer.blob.size for layer in self.layers)

    def save(self, folder: Path) -> None:
        doc = {
            "name": self.name,
            "key": self.key,
            "layers": [
                {"dir": str(x.dir), "digest": x.blob.digest, "size": x.blob.size}
                for x in self.layers
            ],
            "config": self.config.to_json(),
            "architecture": self.architecture,
        }
        (folder / "image.json").write_text(json.dumps(doc, indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path) -> Image | None:
        """The image recorded in folder, or None if it is missing or a layer it reuses
        from a base is gone or was built again since (its record disagrees)."""
        doc = _read(folder)
        if doc is None:
            return None
        layers = tuple(Layer(Path(x["dir"]), Blob(x["digest"], x["size"])) for x in doc["layers"])
        for layer in layers:
            owner = _read(layer.dir.parent) or {"layers": []}
            recorded = {(x["dir"], x["digest"], x["size"]) for x in owner["layers"]}
            if (str(layer.dir), layer.blob.digest, layer.blob.size) not in recorded:
                return None
        config = ImageConfig.from_json(doc["config"])
        return cls(doc["name"], doc["key"], layers, config, doc.get("architecture", "amd64"))


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads((folder / "image.json").read_text())
    except (OSError, ValueError):
        return None
    return doc


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One image build at a time per cache folder (a second caller waits)."""
    images_root().mkdir(parents=True, exist_ok=True)
    with (images_root() / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached(slug: str, key: str) -> Image | None:
    return Image.load(images_root() / slug / key)


def new_layer(folder: Path) -> Layer:
    """Hash a finished layer tree once and keep its digest."""
    return Layer(folder, measure_layer(folder))


@contextlib.contextmanager
def building(slug: str, key: str, keep: int = 1) -> Iterator[Path]:
    """A scratch folder that becomes images/<slug>/<key> when the block succeeds; then
    only the `keep` newest keys of the slug stay (several checkouts on one machine each
    build their own top layer: keeping a few spares them rebuilding each other's).

    Layer trees made inside it must be referenced by their final path (see `final`)."""
    final = images_root() / slug / key
    scratch = final.with_name(f".{key}.tmp")
    remove_tree(scratch)
    scratch.mkdir(parents=True)
    try:
        yield scratch
    except BaseException:
        remove_tree(scratch)
        raise
    scratch.replace(final)
    others = [p for p in final.parent.iterdir() if p != final and not p.name.startswith(".")]
    for old in sorted(others, key=lambda p: p.stat().st_mtime, reverse=True)[keep - 1 :]:
        remove_tree(old)


def final_layer(scratch: Path, tree: Path) -> Layer:
    """A finished layer tree made inside a `building` scratch folder, hashed once and
    named by where it will be once the folder is renamed."""
    return Layer(final_path(scratch, tree), measure_layer(tree))


def final_path(scratch: Path, inner: Path) -> Path:
    """Where a path inside a `building` scratch folder will be once it is renamed."""
    return scratch.with_name(scratch.name[1:].removesuffix(".tmp")) / inner.relative_to(scratch)


def remove_tree(path: Path) -> None:
    """rmtree that also removes read-only folders (pip and overlay leave some)."""
    if not path.exists() and not path.is_symlink():
        return

    def retry(func: Callable[..., object], failed: str, _exc: object) -> None:
        os.chmod(os.path.dirname(failed), 0o755)
        func(failed)

    shutil.rmtree(path, onerror=retry)


def _keep_all(rel: str) -> bool:
    return True


def tree_fingerprint(source: Path, keep: Callable[[str], bool] = _keep_all) -> str:
    """A cheap identity of a host tree: names, modes, sizes and mtimes (no __pycache__,
    which running Python keeps adding to; no folder sizes and mtimes either, which change
    when Python adds a __pycache__ to them, while their files say what changed)."""
    sha = hashlib.sha256()
    for rel, st in _scan(source, keep):
        if "__pycache__" in rel:
            continue
        if stat.S_ISDIR(st.st_mode):
            sha.update(f"{rel}\0{st.st_mode}\n".encode())
        else:
            sha.update(f"{rel}\0{st.st_mode}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return sha.hexdigest()


def _scan(source: Path, keep: Callable[[str], bool]) -> Iterator[tuple[str, os.stat_result]]:
    stack = [""]
    while stack:
        rel = stack.pop()
        folder = source / rel if rel else source
        for name in sorted(os.listdir(folder)):
            child = f"{rel}/{name}" if rel else name
            if not keep(child):
                continue
            st = (folder / name).lstat()
            yield child, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(child)


def link_tree(source: Path, layer_root: Path, keep: Callable[[str], bool] = _keep_all) -> None:
    """Put source at its own absolute path inside layer_root, as hard links.

    The folders leading to it are 0755, so a non-root container user can reach it (the
    host's /root is 0700). Falls back to copying across filesystems."""
    target = layer_root / source.relative_to("/")
    for parent in reversed(target.relative_to(layer_root).parents):
        (layer_root / parent).mkdir(mode=0o755, exist_ok=True)
        os.chmod(layer_root / parent, 0o755)
    target.mkdir(mode=0o755, exist_ok=True)
    folders = [(source, target)]
    for rel, st in _scan(source, keep):
        src, dst = source / rel, target / rel
        if stat.S_ISDIR(st.st_mode):
            dst.mkdir()
            folders.append((src, dst))
        elif stat.S_ISLNK(st.st_mode):
            dst.symlink_to(os.readlink(src))
        else:
            try:
                os.link(src, dst)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.copy2(src, dst)
    for src, dst in reversed(folders):
        shutil.copystat(src, dst)
        os.chmod(dst, stat.S_IMODE(src.stat().st_mode) | 0o555)
