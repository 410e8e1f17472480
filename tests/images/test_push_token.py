"""The pusher against a registry that wants the distribution token flow (as quay.io, ghcr.io
and Harbor do): Debian's docker-registry with `auth: token`, and a token service the test
runs (ES256 JWTs whose x5c chain ends at the CA the registry trusts, given to the account
only). The pusher follows the Bearer challenge with the account and pushes."""

from __future__ import annotations

import base64
import datetime
import http.server
import json
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from spyre_devcluster import registry
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.images.push import client, push
from spyre_devcluster.images.store import Image, ImageBuildError
from spyre_devcluster.simulate import poll_until
from spyre_operator.webhook import certs

pytestmark = pytest.mark.images

SERVICE, ISSUER = "spyre-test-registry", "spyre-test-tokens"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Tokens:
    """The token service: GET ?service=&scope=repository:NAME:ACTIONS with the account's
    basic auth -> {"token": JWT}; anything else 401."""

    def __init__(self, issued: certs.Certs, user: str, password: str) -> None:
        self.key = serialization.load_pem_private_key(issued.key, None)
        der = x509.load_pem_x509_certificate(issued.cert).public_bytes(serialization.Encoding.DER)
        self.chain = [base64.b64encode(der).decode()]  # x5c: standard base64, padded
        self.basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.asked: list[str] = []

    def token(self, scope: str) -> str:
        kind, name, actions = scope.split(":")
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": self.chain}
        claims = {
            "iss": ISSUER, "sub": "spyre", "aud": SERVICE, "exp": now + 300, "nbf": now - 60,
            "iat": now, "jti": uuid.uuid4().hex,
            "access": [{"type": kind, "name": name, "actions": actions.split(",")}],
        }  # fmt: skip
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        assert isinstance(self.key, ec.EllipticCurvePrivateKey)
        r, s = decode_dss_signature(self.key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def serve(self, tls: Path) -> tuple[http.server.HTTPServer, str]:
        """On HTTPS with the registry's certificate (in folder `tls`): the client sends
        the account's credentials to a token service over HTTPS only."""
        tokens = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = dict(p.split("=", 1) for p in self.path.partition("?")[2].split("&") if p)
                scope = unquote(query.get("scope", ""))
                if self.headers.get("Authorization") != tokens.basic or not scope:
                    self.send_response(401)
                    self.end_headers()
                    return
                tokens.asked.append(scope)
                body = json.dumps({"token": tokens.token(scope)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.HTTPServer(("127.0.0.1", free_port()), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"https://127.0.0.1:{server.server_port}/token"


@pytest.fixture(scope="module")
def token_registry(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[registry.Registry, Tokens]]:
    registry.install(print)
    folder = tmp_path_factory.mktemp("registry")
    reg, config = registry.configure(folder / "conf", free_port(), folder / "storage")
    signer = certs.issue(["tokens"], datetime.datetime.now(datetime.UTC), ca_name="spyre-tokens")
    (folder / "token-ca.crt").write_bytes(signer.ca_cert)
    tokens = Tokens(signer, reg.username, reg.password)
    server, realm = tokens.serve(folder / "conf")
    settings = yaml.safe_load(config.read_text())
    settings["auth"] = {"token": {"realm": realm, "service": SERVICE, "issuer": ISSUER,
                                  "rootcertbundle": str(folder / "token-ca.crt")}}  # fmt: skip
    config.write_text(yaml.safe_dump(settings))
    with (folder / "registry.log").open("w") as log:
        proc = subprocess.Popen(registry.command(config), stdout=log, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: registry.answers(reg), "the registry answers", 30, interval=0.2)
        yield reg, tokens
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()
        print((folder / "registry.log").read_text()[-3000:])


def test_a_push_follows_the_bearer_challenge_with_the_account(
    token_registry: tuple[registry.Registry, Tokens], pause: Image
) -> None:
    reg, tokens = token_registry
    name = f"test-{uuid.uuid4().hex[:8]}"
    done = push(pause, reg, name, "1", prefix="tokens")
    assert not done.already and done.digest == pause.manifest.digest
    repo = f"tokens/{name}"
    assert tokens.asked[0] == f"repository:{repo}:pull,push"  # the manifest's HEAD
    assert client(reg, repo).manifest_digest("1") == pause.manifest.digest
    assert push(pause, reg, name, "1", prefix="tokens").already
    with pytest.raises(ImageBuildError, match=r"a token request to https://\S+ with HTTP 401"):
        push(pause, replace(reg, password="not-it"), name, "2", prefix="tokens")
