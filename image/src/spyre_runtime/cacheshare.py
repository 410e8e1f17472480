"""Compiled caches shared through an OCI registry: publish a ready key, look one up, fetch
one into the volume, list what a repository holds.

Used by the compile Job (publish after READY), the pull Job (fetch instead of compiling)
and `spyre-operator cache ls|push|pull`. The artifact's format and checks are
cacheartifact.py and cacheunpack.py; the HTTP is ociregistry.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .cacheartifact import (
    DEFAULT_LIMITS,
    KEY,
    MEDIA_RECORD,
    Artifact,
    Digester,
    Limits,
    Refused,
    blob_descriptor,
    check_manifest,
    pack,
    tag,
    write_tree,
)
from .cacheunpack import receive
from .clean import Refused as NotAKeyDir
from .clean import key_dir
from .contract import READY_NAME
from .ociregistry import Client


@dataclass(frozen=True)
class Moved:
    """One push or pull: where, what, how much."""

    reference: str  # repository:tag
    digest: str  # the manifest's
    bytes: int  # sent or received (0 when the registry, or the volume, had it all)
    files: int
    seconds: float
    already: bool  # nothing to move: the tag (or the volume) had this key already
    written: int | None = None  # a pull: the key's bytes on the volume, as its record says


def _key_dir(root: Path, key: str) -> Path | None:
    try:
        return key_dir(root, key)
    except NotAKeyDir as e:
        raise Refused(str(e)) from None


def publish(client: Client, root: Path, key: str, arch: str) -> Moved:
    """Push `<root>/<key>` (a ready key) as `<repository>:<key>-<arch>`; blobs the
    repository has are not sent again."""
    began = time.monotonic()
    folder = _key_dir(root, key)
    if folder is None:
        raise Refused(f"{root / key} does not exist: nothing to publish")
    packed = pack(folder, key, arch)
    name = tag(key, arch)
    reference = f"{client.repository}:{name}"
    there = client.manifest(name, DEFAULT_LIMITS.manifest_bytes)
    if there is not None and there[0] == packed.manifest:
        return Moved(reference, there[1], 0, packed.files, time.monotonic() - began, True)
    sent = 0
    record = blob_descriptor(MEDIA_RECORD, packed.record)
    if not client.has_blob(record.digest):
        client.upload(record, lambda send: send(packed.record))
        sent += record.size
    if not client.has_blob(packed.tree.digest):

        def stream(send: Callable[[bytes], None]) -> None:
            sink = Digester(send)
            write_tree(folder, sink)
            if (sink.digest, sink.size) != (packed.tree.digest, packed.tree.size):
                raise Refused(f"{folder} changed while it was pushed: push it again")

        client.upload(packed.tree, stream)
        sent += packed.tree.size
    digest = client.put_manifest(name, packed.manifest)
    return Moved(reference, digest, sent, packed.files, time.monotonic() - began, False)


@dataclass(frozen=True)
class Found:
    artifact: Artifact
    digest: str
    reference: str


def lookup(client: Client, key: str, arch: str, limits: Limits = DEFAULT_LIMITS) -> Found | None:
    """The key's artifact for `arch`, checked (Refused when it fails a check); None when
    the repository has no such tag."""
    name = tag(key, arch)
    got = client.manifest(name, limits.manifest_bytes)
    if got is None:
        return None
    manifest, digest = got
    return Found(check_manifest(manifest, key, arch, limits), digest, f"{client.repository}:{name}")


def fetch(
    client: Client, root: Path, key: str, arch: str, limits: Limits = DEFAULT_LIMITS
) -> Moved | None:
    """Pull the key into `<root>/<key>` (READY last); None when the repository lacks it.
    A key already READY on the volume is left as it is."""
    began = time.monotonic()
    folder = _key_dir(root, key)
    if folder is not None and (folder / READY_NAME).exists():
        return Moved(str(folder), "", 0, 0, time.monotonic() - began, True)
    found = lookup(client, key, arch, limits)
    if found is None:
        return None
    origin = {
        "reference": found.reference,
        "digest": found.digest,
        "pulledAt": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    got = receive(root, key, arch, found.artifact, client.blob, origin, limits)
    seconds = time.monotonic() - began
    return Moved(found.reference, found.digest, got.bytes, got.files, seconds, False, got.written)


@dataclass(frozen=True)
class Listed:
    tag: str
    annotations: dict[str, str]  # empty when the manifest is not a cache's
    problem: str = ""  # why it is not a usable cache artifact


def listing(client: Client, limits: Limits = DEFAULT_LIMITS) -> list[Listed]:
    """Every cache tag of the repository with its annotations (one manifest GET each)."""
    found = []
    for name in sorted(client.tags()):
        key, _, arch = name.partition("-")
        if not KEY.match(key) or not arch:
            continue
        got = client.manifest(name, limits.manifest_bytes)
        if got is None:  # deleted meanwhile
            continue
        try:
            found.append(Listed(name, check_manifest(got[0], key, arch, limits).annotations))
        except Refused as e:
            found.append(Listed(name, {}, str(e)))
    return found
