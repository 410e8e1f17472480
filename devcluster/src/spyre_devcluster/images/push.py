"""Push built images to a registry over the distribution HTTP API v2 (TLS; basic auth, or
the token a registry's Bearer challenge asks for).

The project's own pusher rather than skopeo: a layer is streamed from its tree straight
into the upload (the same deterministic tar whose digest the build stored), so a 9 GB
layer needs no OCI layout on disk first. What the registry has is never sent again: an
image whose tag already names the same manifest is skipped whole (one HEAD), and a blob
the repository has is skipped (one HEAD each). Layers go uncompressed, as the build made
them (containerd pulls them as they are). A blob another repository of the registry holds
is mounted from there (a release to a new path of a registry that has the images moves
no layer again). The registry's API is spoken by the runtime's client
(spyre_runtime/ociregistry.py), the one the cache artifacts travel with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster.images.oci import (
    CHUNK,
    MEDIA_CONFIG,
    MEDIA_INDEX,
    MEDIA_LAYER,
    Blob,
    Digester,
    LayerChanged,
    blob_of,
    index_bytes,
    write_layer,
)
from spyre_devcluster.images.store import Image, ImageBuildError
from spyre_devcluster.registry import REPOSITORY_PREFIX, Registry
from spyre_runtime.cacheartifact import Descriptor
from spyre_runtime.ociregistry import Client, RegistryError, Repository


@dataclass(frozen=True)
class Pushed:
    reference: str
    digest: str  # the manifest's
    sent: int  # bytes of blobs uploaded
    skipped: int  # blobs the repository had, or mounted from another of the registry's
    seconds: float
    already: bool  # the tag named this manifest: nothing sent


class _Sender:
    """A writer that sends in CHUNK-sized pieces (a layer's tar is written in many small
    headers)."""

    def __init__(self, send: Callable[[bytes], None]) -> None:
        self.send = send
        self.buffer = bytearray()

    def write(self, data: bytes) -> int:
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buffer:
            self.send(bytes(self.buffer))
            self.buffer.clear()


def client(registry: Registry, repository: str) -> Client:
    """The registry's `repository` (a path), with its account and its CA: the runtime's
    client of the distribution API (spyre_runtime/ociregistry.py)."""
    auth = (registry.username, registry.password) if registry.username else None
    return Client(Repository(registry.address, repository), auth, registry.ca)


Writer = Callable[[Callable[[bytes], None]], None]  # streams a blob into the upload


def _bytes_writer(data: bytes) -> Writer:
    def write(send: Callable[[bytes], None]) -> None:
        send(data)

    return write


def _layer_writer(folder: Path, blob: Blob) -> Writer:
    def write(send: Callable[[bytes], None]) -> None:
        out = _Sender(send)
        sink = Digester(out)
        try:
            write_layer(folder, sink)
        except FileNotFoundError as exc:
            raise LayerChanged(
                f"{exc.filename} is gone: a newer build replaced this image; build it again"
            ) from exc
        out.flush()
        if (sink.digest, sink.size) != (blob.digest, blob.size):
            raise LayerChanged(f"layer {folder} changed since it was hashed; build it again")

    return write


def _send_blobs(registry: Registry, target: Client, image: Image) -> tuple[int, int]:
    """The config and layers the repository lacks; (bytes sent, blobs skipped)."""
    config = image.manifest.config_bytes
    blobs = [(MEDIA_CONFIG, blob_of(config), _bytes_writer(config))]
    blobs += [(MEDIA_LAYER, x.blob, _layer_writer(x.dir, x.blob)) for x in image.layers]
    sent = skipped = 0
    others: list[str] | None = None  # the registry's other repositories, asked once
    for media_type, blob, write in blobs:
        if target.has_blob(blob.digest):
            skipped += 1
            continue
        if others is None:
            others = [r for r in target.catalog() if r != target.repository.path]
        holder = next((r for r in others if client(registry, r).has_blob(blob.digest)), None)
        if holder and target.mount(blob.digest, holder):
            skipped += 1
            continue
        target.upload(Descriptor(media_type, blob.digest, blob.size), write)
        sent += blob.size
    return sent, skipped


@contextmanager
def _said(registry: Registry) -> Iterator[None]:
    """The client's refusals as the image commands' errors."""
    try:
        yield
    except RegistryError as exc:
        raise ImageBuildError(f"pushing to {registry.address}: {exc}") from exc


def push(
    image: Image, registry: Registry, name: str, tag: str, prefix: str = REPOSITORY_PREFIX
) -> Pushed:
    """Make image available as <registry>/<prefix>/<name>:<tag>."""
    began = time.monotonic()
    repository = f"{prefix}/{name}" if prefix else name
    target = client(registry, repository)
    reference = f"{registry.address}/{repository}:{tag}"
    manifest = image.manifest
    with _said(registry):
        if target.manifest_digest(tag) == manifest.digest:
            return Pushed(reference, manifest.digest, 0, 0, time.monotonic() - began, True)
        sent, skipped = _send_blobs(registry, target, image)
        target.put_manifest(tag, manifest.manifest_bytes)
    return Pushed(reference, manifest.digest, sent, skipped, time.monotonic() - began, False)


def push_index(images: list[Image], registry: Registry, repository: str, tag: str) -> Pushed:
    """Push one image per architecture, each manifest also as <tag>-<arch>, then the index
    of them as <registry>/<repository>:<tag> (what a multi-arch pull resolves).

    The per-architecture tags are for running an architecture other than the host's:
    containerd's CRI takes the host's platform from an index and has no setting to take
    another, while a tag naming one manifest is run as it is (under binfmt_misc)."""
    began = time.monotonic()
    target = client(registry, repository)
    reference = f"{registry.address}/{repository}:{tag}"
    index = index_bytes([image.manifest for image in images])
    digest = blob_of(index).digest
    sent = skipped = 0
    with _said(registry):
        if target.manifest_digest(tag, MEDIA_INDEX) == digest:
            return Pushed(reference, digest, 0, 0, time.monotonic() - began, True)
        for image in images:
            manifest = image.manifest
            own = f"{tag}-{image.architecture}"
            if target.manifest_digest(own) != manifest.digest:
                more, had = _send_blobs(registry, target, image)
                sent, skipped = sent + more, skipped + had
                target.put_manifest(own, manifest.manifest_bytes)
        target.put_manifest(tag, index, MEDIA_INDEX)
    return Pushed(reference, digest, sent, skipped, time.monotonic() - began, False)
