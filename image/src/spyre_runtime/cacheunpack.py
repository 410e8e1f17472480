"""Receiving a cache artifact into the volume, safely.

The layer is read once, as it streams: hashed while it is unpacked into a staging
directory beside the keys (`<root>/.pulling-<key>-<random>`), each tar member checked before
a byte of it is written (a plain relative path, no `..`, no links, devices or fifos, no
READY of its own, under the caps). Only when the whole layer matched its digest does the
staging directory become `<root>/<key>` (one rename), and READY is written last, from the
record the manifest named: whatever stops a pull half-way leaves nothing that looks ready.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .cacheartifact import (
    DEFAULT_LIMITS,
    Artifact,
    Descriptor,
    Digester,
    Limits,
    Refused,
    check_record,
    check_record_matches,
)
from .catalog import write_ready
from .clean import remove_key
from .contract import INDUCTOR_CACHE_SUBDIR, INDUCTOR_FILES, READY_NAME
from .inductorcopy import lacking

STAGING = ".pulling-"
CHUNK = 1 << 20


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class VerifyingReader:
    """Reads a blob from `source`, hashing it; refuses a byte past the declared size, and
    `finish` refuses a blob shorter than declared or with another digest."""

    def __init__(self, source: Readable, descriptor: Descriptor) -> None:
        self.source = source
        self.descriptor = descriptor
        self.digester = Digester()

    def read(self, size: int = -1) -> bytes:
        left = self.descriptor.size - self.digester.size
        # one byte more than may come: a blob longer than declared is seen at once
        want = left + 1 if size < 0 or size > left else size
        data = self.source.read(want)
        if len(data) > left:
            raise Refused(
                f"the blob {self.descriptor.digest} is longer than the {self.descriptor.size} "
                "bytes its manifest declares"
            )
        self.digester.write(data)
        return data

    def finish(self) -> None:
        while self.read(CHUNK):  # the tar's end padding, or a tail that is no tar
            pass
        if self.digester.size != self.descriptor.size:
            raise Refused(
                f"the blob {self.descriptor.digest} ended after {self.digester.size} of its "
                f"{self.descriptor.size} bytes"
            )
        if self.digester.digest != self.descriptor.digest:
            raise Refused(
                f"the blob's content has digest {self.digester.digest}, not the "
                f"{self.descriptor.digest} its manifest names: it was altered"
            )


def read_blob(source: Readable, descriptor: Descriptor) -> bytes:
    """A small blob (the record), whole and verified."""
    reader = VerifyingReader(source, descriptor)
    data = reader.read(descriptor.size)
    while len(data) < descriptor.size:
        more = reader.read(descriptor.size - len(data))
        if not more:
            break
        data += more
    reader.finish()
    return data


def member_path(member: tarfile.TarInfo) -> str:
    """The member's path, if it is one the layer may hold; Refused saying why not."""
    name = member.name
    parts = name.split("/")
    if name.startswith("/"):
        raise Refused(f"the layer holds an absolute path {name!r}")
    if "\x00" in name or any(part in ("", ".", "..") for part in parts):
        raise Refused(f"the layer holds {name!r}, not a plain relative path (no '..', no '.')")
    if member.issym() or member.islnk():
        raise Refused(f"the layer holds a link {name!r} -> {member.linkname!r}")
    if member.ischr() or member.isblk() or member.isfifo():
        raise Refused(f"the layer holds a device or fifo {name!r}")
    if member.issparse() or not (member.isreg() or member.isdir()):
        raise Refused(f"the layer holds {name!r}, neither a regular file nor a directory")
    if parts == [READY_NAME]:
        raise Refused(f"the layer holds a {READY_NAME} of its own (it comes from the record)")
    return name


def unpack(reader: VerifyingReader, target: Path, limits: Limits) -> int:
    """Unpack the layer into the empty folder `target`; the number of files."""
    files = 0
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                path = target / member_path(member)
                if member.isdir():
                    path.mkdir(mode=0o755, parents=True, exist_ok=True)
                    continue
                files += 1
                if files > limits.files:
                    raise Refused(f"the layer holds more than {limits.files} files")
                path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                mode = 0o755 if member.mode & 0o111 else 0o644
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                try:
                    fd = os.open(path, flags, mode)
                except FileExistsError:
                    raise Refused(f"the layer holds {member.name!r} twice") from None
                source = tar.extractfile(member)
                with os.fdopen(fd, "wb") as out:
                    while source is not None and (chunk := source.read(CHUNK)):
                        out.write(chunk)
    except tarfile.TarError as e:
        raise Refused(f"the layer is not a readable tar: {e}") from None
    reader.finish()
    return files


@dataclass(frozen=True)
class Received:
    bytes: int  # what came over the wire: the record and the layer
    files: int
    written: int | None  # what the compile wrote under the key, as its verified record says


def clear_staging(root: Path, key: str) -> None:
    """Staging folders an earlier, killed pull of the key left."""
    for leftover in root.glob(f"{STAGING}{key}-*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)


def receive(
    root: Path,
    key: str,
    arch: str,
    artifact: Artifact,
    open_blob: Callable[[Descriptor], Readable],
    origin: dict[str, Any],
    limits: Limits = DEFAULT_LIMITS,
) -> Received:
    """Fetch, verify and put the artifact in place as `<root>/<key>` with READY last.
    `origin` (where it came from) is added to READY as `pulledFrom`."""
    record_bytes = read_blob(open_blob(artifact.record), artifact.record)
    record = check_record(record_bytes, key)
    check_record_matches(record, artifact, arch)
    clear_staging(root, key)
    staging = root / f"{STAGING}{key}-{secrets.token_hex(4)}"
    staging.mkdir(mode=0o755)
    try:
        files = unpack(VerifyingReader(open_blob(artifact.tree), artifact.tree), staging, limits)
        gone = lacking(record.get(INDUCTOR_FILES) or {}, staging / INDUCTOR_CACHE_SUBDIR)
        if gone:
            raise Refused(
                f"the layer lacks {len(gone)} of the inductor files its record lists "
                f"(such as {INDUCTOR_CACHE_SUBDIR}/{gone[0]})"
            )
        remove_key(root, key)  # a compile or pull of the key that never finished
        os.rename(staging, root / key)
    except BaseException:
        if staging.exists():
            shutil.rmtree(staging)
        raise
    write_ready(root / key, {**record, "pulledFrom": origin})
    written = record.get("bytes")
    size = written if type(written) is int and written >= 0 else None
    return Received(artifact.record.size + artifact.tree.size, files, size)
