"""A client of the OCI distribution API (v2) over HTTPS, with basic auth or the token
protocol (a Bearer challenge answered with a token from the registry's token service, as
Docker Hub, GHCR, Quay and Harbor ask): what pushing and pulling a cache artifact needs,
and what the devcluster's image pushes add (a tag's digest by HEAD, an index, the
catalog and a blob mounted from another repository: spyre_devcluster/images/push.py).

The standard library only (http.client), so the runtime image and the operator image need
no new package on any architecture. A repository is named as `host[:port]/path`
(`registry.example.com/spyre/caches`); credentials come from a Docker config file (the
`.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` Secret, or `~/.docker/config.json`),
a private CA from a PEM file.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cacheartifact import MEDIA_MANIFEST, Descriptor, Refused

TIMEOUT = 600.0  # a socket read: a registry verifies a big blob's digest before it answers
CHUNK = 1 << 20
_REDIRECTS = 5
# distribution's grammar: host[:port] then lowercase path components (also the CRD's
# pattern of spec.cache.registry.repository: no named groups, which JSON schema lacks)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_PATTERN = rf"^[A-Za-z0-9.-]+(?::[0-9]+)?/{_COMPONENT}(?:/{_COMPONENT})*$"


_PARAM = re.compile(r'(\w+)="([^"]*)"')


def _is_bearer(challenge: str) -> bool:
    return challenge.split(" ", 1)[0].lower() == "bearer"


class RegistryError(Exception):
    """The registry cannot be reached, or refused a request; the message says which."""


@dataclass(frozen=True)
class Repository:
    host: str  # host[:port]
    path: str

    @classmethod
    def parse(cls, text: str) -> Repository:
        if re.fullmatch(REPOSITORY_PATTERN, text) is None:
            raise RegistryError(
                f"{text!r} is not a repository: host[:port]/path, lowercase, no scheme, tag "
                "or digest (e.g. registry.example.com/spyre/caches)"
            )
        host, _, path = text.partition("/")
        return cls(host, path)

    def __str__(self) -> str:
        return f"{self.host}/{self.path}"


def credentials(docker_config: Mapping[str, Any], host: str) -> tuple[str, str] | None:
    """The (username, password) a Docker config holds for `host`, if any."""
    auths = docker_config.get("auths")
    entry = auths.get(host) or auths.get(f"https://{host}") if isinstance(auths, dict) else None
    if not isinstance(entry, dict):
        return None
    if entry.get("username") and entry.get("password"):
        return str(entry["username"]), str(entry["password"])
    if entry.get("auth"):
        user, sep, password = base64.b64decode(entry["auth"]).decode().partition(":")
        if sep:
            return user, password
    return None


def read_credentials(path: Path | None, host: str) -> tuple[str, str] | None:
    if path is None or not path.exists():
        return None
    try:
        config = json.loads(path.read_text())
    except ValueError as e:
        raise RegistryError(f"{path} is not a Docker config (JSON): {e}") from None
    return credentials(config if isinstance(config, dict) else {}, host)


class Client:
    """One repository of one registry, with its account's credentials."""

    def __init__(
        self,
        repository: Repository,
        auth: tuple[str, str] | None = None,
        ca_file: str | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        self.repository = repository
        self.context = ssl.create_default_context(cafile=ca_file)
        self.timeout = timeout
        self.headers: dict[str, str] = {}
        self.basic: dict[str, str] = {}  # for the registry, or its token service
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            self.basic["Authorization"] = f"Basic {token}"
            self.headers.update(self.basic)

    def _connect(self, netloc: str) -> http.client.HTTPSConnection:
        host, _, port = netloc.rpartition(":") if ":" in netloc else (netloc, "", "443")
        return http.client.HTTPSConnection(
            host, int(port), context=self.context, timeout=self.timeout
        )

    def _send(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> http.client.HTTPResponse:
        """One request; redirects (a blob served from elsewhere) followed, credentials
        sent to the registry's own host only; a Bearer challenge answered once with a
        token from the registry's token service."""
        logged_in = False
        for _ in range(_REDIRECTS + 2):
            parts = urllib.parse.urlsplit(url)
            own = parts.netloc in ("", self.repository.host)
            netloc = parts.netloc or self.repository.host
            target = urllib.parse.urlunsplit(("", "", parts.path, parts.query, ""))
            sent = {**(self.headers if own else {}), **(headers or {})}
            try:
                conn = self._connect(netloc)
                conn.request(method, target, body=body, headers=sent)
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise RegistryError(f"the registry {netloc} cannot be reached: {e}") from None
            challenge = response.getheader("WWW-Authenticate") or ""
            if response.status == 401 and own and not logged_in and _is_bearer(challenge):
                response.read()
                self._login(challenge)
                logged_in = True
                continue
            if response.status in (301, 302, 303, 307, 308) and method in ("GET", "HEAD"):
                location = response.getheader("Location") or ""
                response.close()
                url = urllib.parse.urljoin(f"https://{netloc}{target}", location)
                if not url.startswith("https://"):
                    raise RegistryError(f"the registry redirected to {url}, not HTTPS")
                continue
            return response
        raise RegistryError(f"more than {_REDIRECTS} redirects for {method} {url}")

    def _login(self, challenge: str) -> None:
        """A token for this repository (pull and push) and whatever else the challenge
        names (the catalog, a mount's source repository) from the service it names (the
        distribution token protocol), with the account's credentials if any."""
        fields = dict(_PARAM.findall(challenge))
        realm = fields.get("realm", "")
        if not realm.startswith("https://"):
            raise RegistryError(f"the registry's token service {realm!r} is not an HTTPS URL")
        own = f"repository:{self.repository.path}:"
        more = [each for each in fields.get("scope", "").split() if not each.startswith(own)]
        scopes = [("scope", each) for each in (f"{own}pull,push", *more)]
        query = urllib.parse.urlencode([("service", fields.get("service", "")), *scopes])
        parts = urllib.parse.urlsplit(realm)
        target = f"{parts.path or '/'}?{'&'.join(q for q in (parts.query, query) if q)}"
        try:
            conn = self._connect(parts.netloc)
            conn.request("GET", target, headers=self.basic)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise RegistryError(f"the token service {realm} cannot be reached: {e}") from None
        if response.status != 200:
            raise self._fail(response, f"a token request to {realm}")
        try:
            answer = json.loads(response.read(1 << 20))
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token service {realm} answered without a token")
        self.headers["Authorization"] = f"Bearer {token}"

    def _fail(self, response: http.client.HTTPResponse, what: str) -> RegistryError:
        detail = response.read(4096).decode(errors="replace").strip()
        response.close()
        hint = {
            401: ": check the credentials (the Docker config's entry for this host)",
            403: ": the account may not do this in this repository",
        }.get(response.status, "")
        return RegistryError(
            f"the registry {self.repository.host} answered {what} with HTTP {response.status} "
            f"{response.reason}{hint}" + (f" ({detail[:300]})" if detail else "")
        )

    def _v2(self, kind: str, reference: str) -> str:
        return f"/v2/{self.repository.path}/{kind}/{reference}"

    def ping(self) -> None:
        """The API answers and takes the credentials."""
        response = self._send("GET", "/v2/")
        if response.status != 200:
            raise self._fail(response, "GET /v2/")
        response.read()

    # ----- reading --------------------------------------------------------------------
    def manifest(self, reference: str, cap: int) -> tuple[bytes, str] | None:
        """(manifest, its digest) of a tag or digest, None when the repository lacks it."""
        response = self._send(
            "GET", self._v2("manifests", reference), headers={"Accept": MEDIA_MANIFEST}
        )
        if response.status == 404:
            response.read()
            return None
        if response.status != 200:
            raise self._fail(response, f"GET manifest {reference}")
        data = response.read(cap + 1)
        response.close()
        if len(data) > cap:
            raise Refused(f"the manifest of {reference} is over the cap of {cap} bytes")
        return data, response.getheader("Docker-Content-Digest") or ""

    def manifest_digest(self, reference: str, media_type: str = MEDIA_MANIFEST) -> str | None:
        """The digest of the manifest (or index) a tag names, by HEAD; None when the
        repository lacks it."""
        response = self._send(
            "HEAD", self._v2("manifests", reference), headers={"Accept": media_type}
        )
        response.read()
        if response.status == 404:
            return None
        if response.status != 200:
            raise self._fail(response, f"HEAD manifest {reference}")
        return response.getheader("Docker-Content-Digest") or ""

    def catalog(self) -> list[str]:
        """The registry's repositories (its catalog's first page); none where it keeps its
        catalog to itself, as quay.io does."""
        response = self._send("GET", "/v2/_catalog?n=100")
        data = response.read()
        try:
            names = json.loads(data).get("repositories") if response.status == 200 else None
        except (ValueError, AttributeError):
            names = None
        return [str(name) for name in names or []]

    def blob(self, descriptor: Descriptor) -> http.client.HTTPResponse:
        """The blob's body as a stream (the caller verifies it while reading)."""
        response = self._send("GET", self._v2("blobs", descriptor.digest))
        if response.status != 200:
            raise self._fail(response, f"GET blob {descriptor.digest}")
        return response

    def tags(self) -> list[str]:
        """Every tag of the repository (none when the repository does not exist yet)."""
        found: list[str] = []
        url: str | None = self._v2("tags", "list") + "?n=1000"
        while url:
            response = self._send("GET", url)
            if response.status == 404:
                response.read()
                return found
            if response.status != 200:
                raise self._fail(response, "GET tags/list")
            page = json.loads(response.read())
            found += page.get("tags") or []
            following = re.search(r"<([^>]+)>;\s*rel=\"?next\"?", response.getheader("Link") or "")
            url = following.group(1) if following else None
        return found

    # ----- writing --------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        response = self._send("HEAD", self._v2("blobs", digest))
        response.read()
        if response.status in (200, 404):
            return response.status == 200
        raise self._fail(response, f"HEAD blob {digest}")

    def mount(self, digest: str, source: str) -> bool:
        """The registry links a blob it holds in repository `source` (a path on the same
        registry) into this one (the cross-repository mount): no byte sent. False where
        it will not."""
        query = urllib.parse.urlencode({"mount": digest, "from": source})
        response = self._send("POST", f"/v2/{self.repository.path}/blobs/uploads/?{query}")
        response.read()
        return response.status == 201

    def upload(
        self, descriptor: Descriptor, write: Callable[[Callable[[bytes], None]], None]
    ) -> None:
        """A monolithic upload: POST for a session, one PUT that `write` streams the blob
        into (it is called with the function that sends a piece)."""
        started = self._send("POST", f"/v2/{self.repository.path}/blobs/uploads/")
        if started.status != 202:
            raise self._fail(started, f"an upload to {self.repository}")
        started.read()
        location = urllib.parse.urlsplit(
            urllib.parse.urljoin(
                f"https://{self.repository.host}/", started.getheader("Location") or ""
            )
        )
        if location.netloc != self.repository.host:
            raise RegistryError(f"the registry sent the upload to another host ({location.netloc})")
        query = "&".join(q for q in (location.query, f"digest={descriptor.digest}") if q)
        conn = self._connect(location.netloc)
        try:
            conn.putrequest("PUT", f"{location.path}?{query}")
            for name, value in {
                **self.headers,
                "Content-Type": "application/octet-stream",
                "Content-Length": str(descriptor.size),
            }.items():
                conn.putheader(name, value)
            conn.endheaders()
            write(conn.send)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise RegistryError(f"the upload of {descriptor.digest} broke off: {e}") from None
        if response.status != 201:
            raise self._fail(response, f"the blob {descriptor.digest} ({descriptor.size} bytes)")
        response.read()

    def put_manifest(self, tag: str, manifest: bytes, media_type: str = MEDIA_MANIFEST) -> str:
        """Tag the manifest (or index); its digest, as the registry computed it."""
        response = self._send(
            "PUT",
            self._v2("manifests", tag),
            body=manifest,
            headers={"Content-Type": media_type},
        )
        if response.status != 201:
            raise self._fail(response, f"the manifest of tag {tag}")
        response.read()
        return response.getheader("Docker-Content-Digest") or ""
