"""OCI image pieces in the standard library: layer tars, config, manifest, index, archive.

A layer is a directory tree laid out as the image's `/`. Its tar is deterministic: entries
sorted by name, numeric owners, integer mtimes (kept, so `.pyc` files stay valid), no
atime/ctime, and the same bytes every time it is written from the same tree. That lets a
multi-GB layer be hashed in one pass and streamed in a second, with no temporary copy.
An overlayfs upper directory is a layer too: its whiteouts (0/0 character devices) and
opaque directories become the OCI `.wh.` entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 1 << 20
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OVERLAY_OPAQUE_XATTR = "trusted.overlay.opaque"

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
ANNOTATION_NAME = "io.containerd.image.name"
ANNOTATION_REF = "org.opencontainers.image.ref.name"


class LayerChanged(RuntimeError):
    """A layer's tree changed between the hash pass and the stream pass."""


class Writer(Protocol):
    def write(self, data: bytes, /) -> object: ...


class Digester:
    """A sink that only counts and hashes (the first pass over a big layer)."""

    def __init__(self, inner: Writer | None = None) -> None:
        self.inner = inner
        self.size = 0
        self._sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._sha.update(data)
        self.size += len(data)
        if self.inner is not None:
            self.inner.write(data)
        return len(data)

    @property
    def digest(self) -> str:
        return "sha256:" + self._sha.hexdigest()


def _info(path: Path, name: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    info.mtime = int(st.st_mtime)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        info.size = st.st_size
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return info


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, OVERLAY_OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _walk(root: Path, rel: str = "") -> Iterator[tuple[Path, str, os.stat_result]]:
    """Every entry under root, depth first, siblings sorted by their bytes."""
    folder = root / rel if rel else root
    for name in sorted(os.listdir(folder), key=os.fsencode):
        path = folder / name
        arc = f"{rel}/{name}" if rel else name
        st = path.lstat()
        if stat.S_ISSOCK(st.st_mode):  # a socket left by a process has no place in an image
            continue
        yield path, arc, st
        if stat.S_ISDIR(st.st_mode):
            yield from _walk(root, arc)


def write_layer(root: Path, out: Writer) -> None:
    """Write the tar of the tree under root (the image's `/`) to out."""
    links: dict[tuple[int, int], str] = {}
    for path, arc, st in _walk(root):
        if _is_whiteout(st):
            parent, _, base = arc.rpartition("/")
            info = tarfile.TarInfo(f"{parent}/{WHITEOUT}{base}" if parent else WHITEOUT + base)
            info.mtime = int(st.st_mtime)
            out.write(_header(info))
            continue
        info = _info(path, arc, st)
        if info.isreg() and st.st_nlink > 1:
            first = links.setdefault((st.st_dev, st.st_ino), arc)
            if first != arc:
                info.type, info.linkname, info.size = tarfile.LNKTYPE, first, 0
        out.write(_header(info))
        if info.isdir() and _is_opaque(path):
            opaque = tarfile.TarInfo(f"{arc}/{OPAQUE}")
            opaque.mtime = info.mtime
            out.write(_header(opaque))
        if info.isreg() and info.size:
            _copy(path, info.size, out)
    out.write(b"\0" * (2 * tarfile.BLOCKSIZE))


def _copy(path: Path, size: int, out: Writer) -> None:
    left = size
    with path.open("rb") as src:
        while left:
            chunk = src.read(min(CHUNK, left))
            if not chunk:
                raise LayerChanged(f"{path} shrank while it was being written")
            out.write(chunk)
            left -= len(chunk)
    pad = -size % tarfile.BLOCKSIZE
    if pad:
        out.write(b"\0" * pad)


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int


def measure_layer(root: Path) -> Blob:
    """The hash pass: digest and size of the layer's tar, nothing stored."""
    sink = Digester()
    write_layer(root, sink)
    return Blob(sink.digest, sink.size)


def canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def blob_of(data: bytes) -> Blob:
    return Blob("sha256:" + hashlib.sha256(data).hexdigest(), len(data))


@dataclass(frozen=True)
class ImageConfig:
    """The runtime part of an image config (what a Containerfile sets)."""

    env: tuple[tuple[str, str], ...] = ()
    user: str = ""
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    workdir: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"Env": [f"{k}={v}" for k, v in self.env]}
        if self.user:
            doc["User"] = self.user
        if self.entrypoint is not None:
            doc["Entrypoint"] = list(self.entrypoint)
        if self.cmd is not None:
            doc["Cmd"] = list(self.cmd)
        if self.workdir:
            doc["WorkingDir"] = self.workdir
        if self.labels:
            doc["Labels"] = dict(self.labels)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> ImageConfig:
        def strings(key: str) -> tuple[str, ...] | None:
            value = doc.get(key)
            return None if value is None else tuple(str(v) for v in value)  # type: ignore[attr-defined]

        env = [str(e).split("=", 1) for e in doc.get("Env", [])]  # type: ignore[attr-defined]
        labels = doc.get("Labels") or {}
        return cls(
            env=tuple((k, v) for k, v in env),
            user=str(doc.get("User", "")),
            entrypoint=strings("Entrypoint"),
            cmd=strings("Cmd"),
            workdir=str(doc.get("WorkingDir", "")),
            labels=tuple(sorted(labels.items())),  # type: ignore[attr-defined]
        )


@dataclass(frozen=True)
class Manifest:
    """The JSON documents of one image, given its layers' blobs."""

    name: str
    config: ImageConfig
    layers: tuple[Blob, ...]
    architecture: str = "amd64"  # the OCI/Go name: amd64, arm64, ppc64le, s390x
    config_bytes: bytes = field(init=False)
    manifest_bytes: bytes = field(init=False)

    def __post_init__(self) -> None:
        config = {
            "architecture": self.architecture,
            "os": "linux",
            "config": self.config.to_json(),
            # uncompressed layers: the diff ID is the blob digest
            "rootfs": {"type": "layers", "diff_ids": [b.digest for b in self.layers]},
        }
        object.__setattr__(self, "config_bytes", canonical(config))
        cfg = blob_of(self.config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": cfg.digest, "size": cfg.size},
            "layers": [
                {"mediaType": MEDIA_LAYER, "digest": b.digest, "size": b.size} for b in self.layers
            ],
        }
        object.__setattr__(self, "manifest_bytes", canonical(manifest))

    @property
    def digest(self) -> str:
        return blob_of(self.manifest_bytes).digest

    def descriptor(self) -> dict[str, object]:
        """This manifest as an entry of an index, with its platform."""
        man = blob_of(self.manifest_bytes)
        return {
            "mediaType": MEDIA_MANIFEST,
            "digest": man.digest,
            "size": man.size,
            "platform": {"architecture": self.architecture, "os": "linux"},
        }

    def index_bytes(self) -> bytes:
        tag = self.name.rpartition(":")[2]
        entry = {
            **self.descriptor(),
            "annotations": {ANNOTATION_NAME: self.name, ANNOTATION_REF: tag},
        }
        return canonical({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [entry]})


def index_bytes(manifests: list[Manifest]) -> bytes:
    """An image index of one manifest per platform (what a multi-arch tag names)."""
    platforms = [m.architecture for m in manifests]
    if len(set(platforms)) != len(platforms):
        raise ValueError(f"one manifest per architecture, got {', '.join(platforms)}")
    entries = [m.descriptor() for m in manifests]
    return canonical({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": entries})


def chain_ids(layers: tuple[Blob, ...]) -> list[str]:
    """containerd names an unpacked layer's snapshot after its chain ID."""
    ids: list[str] = []
    for blob in layers:
        prev = ids[-1] if ids else None
        ids.append(
            blob.digest
            if prev is None
            else "sha256:" + hashlib.sha256(f"{prev} {blob.digest}".encode()).hexdigest()
        )
    return ids


def _file_entry(out: BinaryIO, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    out.write(_header(info))
    out.write(data)
    out.write(b"\0" * (-len(data) % tarfile.BLOCKSIZE))


def _blob_name(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/")


def write_archive(
    out: BinaryIO, manifest: Manifest, layer_dirs: dict[str, Path], skip: frozenset[str]
) -> None:
    """Write an OCI archive of one image: what `ctr images import` reads.

    layer_dirs maps each layer digest to its tree, written in the stream pass and checked
    against the digest of the hash pass. Layers in skip are left out (the importer already
    has them unpacked).
    """
    _file_entry(out, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
    _file_entry(out, _blob_name(blob_of(manifest.config_bytes).digest), manifest.config_bytes)
    _file_entry(out, _blob_name(manifest.digest), manifest.manifest_bytes)
    done: set[str] = set()
    for blob in manifest.layers:
        if blob.digest in skip or blob.digest in done:
            continue
        done.add(blob.digest)
        info = tarfile.TarInfo(_blob_name(blob.digest))
        info.size, info.mode = blob.size, 0o644
        out.write(_header(info))
        sink = Digester(out)
        try:
            write_layer(layer_dirs[blob.digest], sink)
        except FileNotFoundError as exc:
            raise LayerChanged(
                f"{exc.filename} is gone: a newer build replaced this image; build it again"
            ) from exc
        if (sink.digest, sink.size) != (blob.digest, blob.size):
            raise LayerChanged(
                f"layer {layer_dirs[blob.digest]} changed since it was hashed "
                f"({blob.digest}, {blob.size} bytes; now {sink.digest}, {sink.size} bytes)"
            )
        out.write(b"\0" * (-blob.size % tarfile.BLOCKSIZE))
    _file_entry(out, "index.json", manifest.index_bytes())
    out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
