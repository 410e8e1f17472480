"""A few JSON calls to the local API server with the admin token (stdlib only).

The node's start-up and its volume provisioner need GET/POST/DELETE and nothing else;
the local plane's kubeconfig is JSON, so reading it needs no YAML parser.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Api:
    def __init__(self, server: str, token: str) -> None:
        self.server = server
        self.token = token
        self._context = ssl.create_default_context()
        self._context.check_hostname = False
        self._context.verify_mode = ssl.CERT_NONE  # loopback, the plane's own self-signed CA

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Api:
        doc = json.loads(path.read_text())
        return cls(doc["clusters"][0]["cluster"]["server"], doc["users"][0]["user"]["token"])

    def call(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._context) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")[:500]) from exc

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def create(self, path: str, body: object) -> Any:
        """POST; an object that exists already counts as created (idempotent)."""
        try:
            return self.call("POST", path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return None

    def delete(self, path: str) -> None:
        try:
            self.call("DELETE", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
