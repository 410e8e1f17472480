"""A cache key's directory as an OCI artifact, and the checks an artifact must pass.

One key, one artifact, tagged `<key>-<architecture>` (inductor's C++ kernels are built for
the machine that compiled them):

- the config blob is the key's READY record as the compile wrote it (key, config,
  versions, catalog entry, inductor files, timings, bytes);
- one layer, a deterministic tar of everything else under `<root>/<key>/` (the graphs,
  `inductor/`, the catalog);
- the manifest's annotations name the key, flavour, plugin version, model, model commit,
  architecture and bytes, so `cache ls` and the operator's look-up read them without a
  download.

A pulled artifact is trusted for nothing it says: the record must hash to the expected key
(the key is the sha256 of the canonical compile config, which the record carries), the
annotations must agree with the record, and every size is capped before a byte is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from .contract import FLAVOURS, READY_NAME

MEDIA_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE: Final = "application/vnd.spyre-serving.cache.v1"
MEDIA_RECORD: Final = "application/vnd.spyre-serving.cache.ready.v1+json"
MEDIA_TREE: Final = "application/vnd.spyre-serving.cache.tree.v1.tar"

_PREFIX = "dev.spyre.serving.cache."
ANNOTATION_KEY: Final = _PREFIX + "key"
ANNOTATION_FLAVOUR: Final = _PREFIX + "flavour"
ANNOTATION_RUNTIME_VERSION: Final = _PREFIX + "runtime-version"
ANNOTATION_MODEL: Final = _PREFIX + "model"
ANNOTATION_MODEL_COMMIT: Final = _PREFIX + "model-commit"
ANNOTATION_ARCHITECTURE: Final = _PREFIX + "architecture"
ANNOTATION_BYTES: Final = _PREFIX + "bytes"

KEY = re.compile(r"^[0-9a-f]{64}$")
# The files a compile keeps beside the graphs that are no part of them.
NOT_PACKED: Final = frozenset({READY_NAME, ".catalog.lock"})

# platform.machine() -> the OCI architecture names
_ARCHITECTURES: Final = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


class Refused(Exception):
    """An artifact (or a directory to pack) that fails a check; the message says which."""


@dataclass(frozen=True)
class Limits:
    """Caps checked before anything is read: a registry cannot make a pull fill the volume
    or the memory."""

    tree_bytes: int = 256 << 30  # the layer's declared size (the biggest compiles write ~10s of GB)
    files: int = 500_000
    record_bytes: int = 16 << 20  # the READY record (its inductor manifest grows with files)
    manifest_bytes: int = 1 << 20


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str  # sha256:<hex>
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def architecture(machine: str | None = None) -> str:
    """This machine's architecture, by its OCI name."""
    found = machine or platform.machine()
    try:
        return _ARCHITECTURES[found.lower()]
    except KeyError:
        raise Refused(f"no OCI architecture name for machine {found!r}") from None


def tag(key: str, arch: str) -> str:
    if not KEY.match(key):
        raise Refused(f"{key!r} is not a cache key (64 lowercase hex digits)")
    return f"{key}-{arch}"


def canonical_key(config: Any) -> str:
    """The key of a compile config: the sha256 of its canonical JSON (the operator's
    render/cachekey.py)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def blob_descriptor(media_type: str, data: bytes) -> Descriptor:
    return Descriptor(media_type, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))


# ----- packing --------------------------------------------------------------------------
class Digester:
    """A file-like sink that hashes and counts what passes through to `out` (or nowhere)."""

    def __init__(self, out: Callable[[bytes], Any] | None = None) -> None:
        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        if self.out is not None:
            self.out(data)
        return len(data)

    @property
    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


def packed_files(key_dir: Path) -> Iterator[tuple[str, Path, os.stat_result]]:
    """(name in the tar, path, lstat) of what goes into the layer, sorted, directories
    before their contents; anything but files and directories is refused."""
    for top, dirs, files in os.walk(key_dir):
        dirs.sort()
        here = Path(top)
        for name in sorted(files) + dirs:
            path = here / name
            relative = path.relative_to(key_dir).as_posix()
            if here == key_dir and name in NOT_PACKED:
                continue
            st = os.lstat(path)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise Refused(f"{path} is not a regular file or directory: not packed")
            yield relative, path, st


def write_tree(key_dir: Path, out: IO[bytes] | Digester) -> int:
    """The layer: a tar of the key's directory, the same bytes for the same files (sorted,
    no times, owners or permissions beyond the executable bit). Returns the file count."""
    count = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for name, path, st in packed_files(key_dir):
            info = tarfile.TarInfo(name)
            if stat.S_ISDIR(st.st_mode):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size = st.st_size
            info.mode = 0o755 if st.st_mode & 0o111 else 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
            count += 1
    return count


@dataclass(frozen=True)
class Packed:
    """What a push sends: the record, the layer's descriptor and the manifest."""

    record: bytes
    tree: Descriptor
    files: int
    manifest: bytes


def read_record(key_dir: Path, key: str) -> tuple[bytes, dict[str, Any]]:
    """The key's READY record (bytes as written, and parsed): only a ready key is packed."""
    path = key_dir / READY_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Refused(
            f"{key_dir} has no {READY_NAME} marker: it is not a finished compile"
        ) from None
    return data, check_record(data, key)


def pack(key_dir: Path, key: str, arch: str) -> Packed:
    """Describe the artifact of a ready key (one pass over its files to hash the layer)."""
    data, record = read_record(key_dir, key)
    sink = Digester()
    files = write_tree(key_dir, sink)
    tree = Descriptor(MEDIA_TREE, sink.digest, sink.size)
    manifest = build_manifest(record, blob_descriptor(MEDIA_RECORD, data), tree, arch)
    return Packed(data, tree, files, manifest)


def annotations_of(record: dict[str, Any], arch: str) -> dict[str, str]:
    flavour = FLAVOURS[record["flavour"]]
    config = record.get("config") or {}
    return {
        ANNOTATION_KEY: record["cacheKey"],
        ANNOTATION_FLAVOUR: flavour.name,
        ANNOTATION_RUNTIME_VERSION: str((record.get("versions") or {}).get(flavour.module, "")),
        ANNOTATION_MODEL: str(config.get("model", "")),
        ANNOTATION_MODEL_COMMIT: str(config.get("revision", "")),
        ANNOTATION_ARCHITECTURE: arch,
        ANNOTATION_BYTES: str(record.get("bytes", 0)),
    }


def build_manifest(
    record: dict[str, Any], config: Descriptor, tree: Descriptor, arch: str
) -> bytes:
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": config.to_json(),
        "layers": [tree.to_json()],
        "annotations": annotations_of(record, arch),
    }
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


# ----- checking what a registry sent -----------------------------------------------------
def check_record(data: bytes, key: str) -> dict[str, Any]:
    """A READY record that belongs to `key`: its config hashes to the key."""
    try:
        record = json.loads(data)
    except ValueError as e:
        raise Refused(f"the READY record is not JSON: {e}") from None
    if not isinstance(record, dict):
        raise Refused("the READY record is not a JSON object")
    if record.get("cacheKey") != key:
        raise Refused(f"the READY record names key {record.get('cacheKey')!r}, not {key}")
    if canonical_key(record.get("config")) != key:
        raise Refused(f"the READY record's config does not hash to the key {key}")
    if record.get("flavour") not in FLAVOURS:
        raise Refused(f"the READY record names no known flavour ({record.get('flavour')!r})")
    if not isinstance(record.get("catalogEntry"), dict):
        raise Refused("the READY record has no catalog entry")
    return record


@dataclass(frozen=True)
class Artifact:
    """A manifest that passed the checks: what to fetch, and what it says."""

    record: Descriptor
    tree: Descriptor
    annotations: dict[str, str]

    @property
    def bytes(self) -> int:
        return int(self.annotations.get(ANNOTATION_BYTES, "0"))


def _descriptor(raw: Any, media_type: str, cap: int, what: str) -> Descriptor:
    if not isinstance(raw, dict):
        raise Refused(f"the manifest's {what} is not a descriptor")
    digest, size = raw.get("digest"), raw.get("size")
    if raw.get("mediaType") != media_type:
        raise Refused(
            f"the manifest's {what} has media type {raw.get('mediaType')!r}, not {media_type}"
        )
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise Refused(f"the manifest's {what} has no sha256 digest ({digest!r})")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise Refused(f"the manifest's {what} has no size")
    if size > cap:
        raise Refused(f"the {what} is {size} bytes, over the cap of {cap}")
    return Descriptor(media_type, digest, size)


def check_manifest(data: bytes, key: str, arch: str, limits: Limits = DEFAULT_LIMITS) -> Artifact:
    """The manifest of `key`'s artifact for `arch`, or Refused saying why not."""
    if len(data) > limits.manifest_bytes:
        raise Refused(f"the manifest is {len(data)} bytes, over the cap of {limits.manifest_bytes}")
    try:
        manifest = json.loads(data)
    except ValueError as e:
        raise Refused(f"the manifest is not JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("mediaType") != MEDIA_MANIFEST:
        raise Refused(f"not an OCI image manifest (mediaType {MEDIA_MANIFEST} expected)")
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise Refused(f"not a spyre-serving cache (artifactType {manifest.get('artifactType')!r})")
    found = manifest.get("annotations")
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        raise Refused("the manifest has no annotations")
    if found.get(ANNOTATION_KEY) != key:
        raise Refused(
            f"the artifact's annotations name key {found.get(ANNOTATION_KEY)!r}, not {key}"
        )
    if found.get(ANNOTATION_ARCHITECTURE) != arch:
        raise Refused(
            f"the artifact was built on {found.get(ANNOTATION_ARCHITECTURE)!r}, "
            f"this machine is {arch}"
        )
    record = _descriptor(manifest.get("config"), MEDIA_RECORD, limits.record_bytes, "config")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != 1:
        raise Refused("the manifest must have exactly one layer (the key's directory)")
    tree = _descriptor(layers[0], MEDIA_TREE, limits.tree_bytes, "layer")
    return Artifact(record, tree, dict(found))


def check_record_matches(record: dict[str, Any], artifact: Artifact, arch: str) -> None:
    """The annotations say what the record says (a `cache ls` must not show a lie)."""
    expected = annotations_of(record, arch)
    wrong = sorted(k for k, v in expected.items() if artifact.annotations.get(k) != v)
    if wrong:
        raise Refused(
            "the manifest's annotations differ from the READY record: "
            + ", ".join(
                f"{k} is {artifact.annotations.get(k)!r}, the record says {expected[k]!r}"
                for k in wrong
            )
        )
