"""Push built images to a registry over the distribution HTTP API v2 (TLS; basic auth, or
the token a registry's Bearer challenge asks for).

The project's own pusher rather than skopeo: a layer is streamed from its tree straight
into the upload (the same deterministic tar whose digest the build stored), so a 9 GB
layer needs no OCI layout on disk first. What the registry has is never sent again: an
image whose tag already names the same manifest is skipped whole (one HEAD), and a blob
the repository has is skipped (one HEAD each). Layers go uncompressed, as the build made
them (containerd pulls them as they are). A blob another repository of the registry holds
is mounted from there (a release to a new path of a registry that has the images moves
no layer again).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster.images.oci import (
    CHUNK,
    MEDIA_INDEX,
    MEDIA_MANIFEST,
    Blob,
    Digester,
    LayerChanged,
    blob_of,
    index_bytes,
    write_layer,
)
from spyre_devcluster.images.store import Image, ImageBuildError
from spyre_devcluster.registry import REPOSITORY_PREFIX, Registry

TIMEOUT = 600.0  # a socket read: the registry verifies a big blob's digest before it answers


@dataclass(frozen=True)
class Pushed:
    reference: str
    digest: str  # the manifest's
    sent: int  # bytes of blobs uploaded
    skipped: int  # blobs the repository had, or mounted from another of the registry's
    seconds: float
    already: bool  # the tag named this manifest: nothing sent


class _Sender:
    """A writer that sends to the connection in CHUNK-sized pieces (a layer's tar is
    written in many small headers)."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        self.buffer = bytearray()

    def write(self, data: bytes) -> int:
        self.buffer += data
        if len(self.buffer) >= CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buffer:
            self.conn.send(bytes(self.buffer))
            self.buffer.clear()


class Client:
    """The registry's v2 API with its account's credentials: basic auth, or the token a
    Bearer challenge asks for (the distribution token flow of quay.io, ghcr.io, Harbor)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        token = f"{registry.username}:{registry.password}".encode()
        self.basic = "Basic " + base64.b64encode(token).decode()
        self.auth = self.basic
        self.scopes: set[str] = set()  # the scopes a token was fetched for

    def _connect(self) -> http.client.HTTPSConnection:
        context = self.registry.ssl_context()
        return http.client.HTTPSConnection(self.registry.address, context=context, timeout=TIMEOUT)

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> http.client.HTTPResponse:
        return self._exchange(method, path, body, headers)[0]

    def _exchange(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[http.client.HTTPResponse, bytes]:
        while True:
            conn = self._connect()
            conn.request(
                method, path, body=body, headers={"Authorization": self.auth, **(headers or {})}
            )
            response = conn.getresponse()
            data = response.read()
            conn.close()
            if response.status != 401 or not self._token(response):
                return response, data

    def _token(self, refused: http.client.HTTPResponse) -> bool:
        """A token for a Bearer challenge's realm, service and scope, fetched with the
        account (once per scope); False when there is none to fetch."""
        challenge = refused.getheader("WWW-Authenticate") or ""
        if not challenge.lower().startswith("bearer "):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        scope = params.get("scope", "")
        if "realm" not in params or scope in self.scopes:
            return False  # refused with a token of this scope: the account may not
        self.scopes.add(scope)
        query = urllib.parse.urlencode({k: params[k] for k in ("service", "scope") if k in params})
        request = urllib.request.Request(
            f"{params['realm']}?{query}", headers={"Authorization": self.basic}
        )
        try:
            with urllib.request.urlopen(
                request, timeout=60, context=self.registry.ssl_context()
            ) as resp:
                answer = json.loads(resp.read())
        except (OSError, ValueError) as exc:
            raise ImageBuildError(
                f"the token service {params['realm']} of {self.registry.address} refused "
                f"the account {self.registry.username!r}: {exc}"
            ) from exc
        self.auth = "Bearer " + str(answer.get("token") or answer.get("access_token") or "")
        return True

    def _expect(
        self, response: http.client.HTTPResponse, codes: tuple[int, ...], what: str
    ) -> None:
        if response.status not in codes:
            raise ImageBuildError(
                f"the registry {self.registry.address} refused {what}: HTTP {response.status} "
                f"{response.reason}"
            )

    def manifest_digest(
        self, repository: str, tag: str, media_type: str = MEDIA_MANIFEST
    ) -> str | None:
        response = self._request(
            "HEAD", f"/v2/{repository}/manifests/{tag}", headers={"Accept": media_type}
        )
        if response.status == 404:
            return None
        self._expect(response, (200,), f"HEAD manifest {repository}:{tag}")
        return response.getheader("Docker-Content-Digest")

    def has_blob(self, repository: str, digest: str) -> bool:
        response = self._request("HEAD", f"/v2/{repository}/blobs/{digest}")
        if response.status == 404:
            return False
        self._expect(response, (200,), f"HEAD blob {digest}")
        return True

    def repositories(self) -> list[str]:
        """The registry's repositories (its catalog's first page); none where it keeps its
        catalog to itself, as quay.io does."""
        response, data = self._exchange("GET", "/v2/_catalog?n=100")
        try:
            names = json.loads(data).get("repositories") if response.status == 200 else None
        except ValueError:
            names = None
        return [str(name) for name in names or []]

    def mount(self, repository: str, digest: str, source: str) -> bool:
        """The registry links a blob it holds in source into repository (the distribution
        API's cross-repository mount): no byte sent. False where it will not."""
        query = urllib.parse.urlencode({"mount": digest, "from": source})
        response = self._request("POST", f"/v2/{repository}/blobs/uploads/?{query}")
        return response.status == 201

    def upload(self, repository: str, blob: Blob, write: Callable[[_Sender], None]) -> None:
        """A monolithic upload: POST for a session, one PUT streaming the blob."""
        started = self._request("POST", f"/v2/{repository}/blobs/uploads/")
        self._expect(started, (202,), f"an upload to {repository}")
        location = urllib.parse.urlsplit(started.getheader("Location") or "")
        query = "&".join(q for q in (location.query, f"digest={blob.digest}") if q)
        conn = self._connect()
        conn.putrequest("PUT", f"{location.path}?{query}")
        for name, value in (
            ("Authorization", self.auth),
            ("Content-Type", "application/octet-stream"),
            ("Content-Length", str(blob.size)),
        ):
            conn.putheader(name, value)
        conn.endheaders()
        sender = _Sender(conn)
        write(sender)
        sender.flush()
        response = conn.getresponse()
        response.read()
        conn.close()
        self._expect(response, (201,), f"blob {blob.digest} ({blob.size} bytes)")

    def put_manifest(
        self, repository: str, tag: str, manifest: bytes, media_type: str = MEDIA_MANIFEST
    ) -> None:
        response = self._request(
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            body=manifest,
            headers={"Content-Type": media_type},
        )
        self._expect(response, (201,), f"the manifest of {repository}:{tag}")


def _bytes_writer(data: bytes) -> Callable[[_Sender], None]:
    def write(out: _Sender) -> None:
        out.write(data)

    return write


def _layer_writer(folder: Path, blob: Blob) -> Callable[[_Sender], None]:
    def write(out: _Sender) -> None:
        sink = Digester(out)
        try:
            write_layer(folder, sink)
        except FileNotFoundError as exc:
            raise LayerChanged(
                f"{exc.filename} is gone: a newer build replaced this image; build it again"
            ) from exc
        if (sink.digest, sink.size) != (blob.digest, blob.size):
            raise LayerChanged(f"layer {folder} changed since it was hashed; build it again")

    return write


def _send_blobs(client: Client, repository: str, image: Image) -> tuple[int, int]:
    """The config and layers the repository lacks; (bytes sent, blobs skipped)."""
    config = image.manifest.config_bytes
    blobs = [(blob_of(config), _bytes_writer(config))]
    blobs += [(layer.blob, _layer_writer(layer.dir, layer.blob)) for layer in image.layers]
    sent = skipped = 0
    others: list[str] | None = None  # the registry's other repositories, asked once
    for blob, write in blobs:
        if client.has_blob(repository, blob.digest):
            skipped += 1
            continue
        if others is None:
            others = [r for r in client.repositories() if r != repository]
        holder = next((r for r in others if client.has_blob(r, blob.digest)), None)
        if holder and client.mount(repository, blob.digest, holder):
            skipped += 1
            continue
        client.upload(repository, blob, write)
        sent += blob.size
    return sent, skipped


def push(
    image: Image, registry: Registry, name: str, tag: str, prefix: str = REPOSITORY_PREFIX
) -> Pushed:
    """Make image available as <registry>/<prefix>/<name>:<tag>."""
    began = time.monotonic()
    client = Client(registry)
    repository = f"{prefix}/{name}" if prefix else name
    reference = f"{registry.address}/{repository}:{tag}"
    manifest = image.manifest
    if client.manifest_digest(repository, tag) == manifest.digest:
        return Pushed(reference, manifest.digest, 0, 0, time.monotonic() - began, True)
    sent, skipped = _send_blobs(client, repository, image)
    client.put_manifest(repository, tag, manifest.manifest_bytes)
    return Pushed(reference, manifest.digest, sent, skipped, time.monotonic() - began, False)


def push_index(images: list[Image], registry: Registry, repository: str, tag: str) -> Pushed:
    """Push one image per architecture, each manifest also as <tag>-<arch>, then the index
    of them as <registry>/<repository>:<tag> (what a multi-arch pull resolves).

    The per-architecture tags are for running an architecture other than the host's:
    containerd's CRI takes the host's platform from an index and has no setting to take
    another, while a tag naming one manifest is run as it is (under binfmt_misc)."""
    began = time.monotonic()
    client = Client(registry)
    reference = f"{registry.address}/{repository}:{tag}"
    index = index_bytes([image.manifest for image in images])
    digest = blob_of(index).digest
    if client.manifest_digest(repository, tag, MEDIA_INDEX) == digest:
        return Pushed(reference, digest, 0, 0, time.monotonic() - began, True)
    sent = skipped = 0
    for image in images:
        manifest = image.manifest
        own = f"{tag}-{image.architecture}"
        if client.manifest_digest(repository, own) != manifest.digest:
            more, had = _send_blobs(client, repository, image)
            sent, skipped = sent + more, skipped + had
            client.put_manifest(repository, own, manifest.manifest_bytes)
    client.put_manifest(repository, tag, index, MEDIA_INDEX)
    return Pushed(reference, digest, sent, skipped, time.monotonic() - began, False)
