"""The registry client's token protocol against the testbed's REAL registry configured for
token auth (distribution's `auth: token`: it verifies each token's RS256 signature against
its root certificate, the issuer, the audience and the repository's actions), with a token
service of the test's own in front: `cache push` and `pull` get a token with the
account's credentials and use it; wrong credentials are refused by the token service."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from cachelib import KEY, Bed, compiled, files_of, running_registry
from spyre_devcluster.controlplane import free_port
from spyre_operator.cli import main

pytestmark = pytest.mark.integration

ISSUER, SERVICE = "spyre-test-tokens", "spyre-test-registry"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def certificate(key: rsa.RSAPrivateKey) -> x509.Certificate:
    """The token signer's self-signed certificate: the root the registry trusts."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ISSUER)])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


@dataclass
class Tokens:
    """A token service: Basic auth of the registry's account -> an RS256 JWT with an x5c
    chain of its signing certificate (the root the registry trusts)."""

    user: str
    password: str
    key: rsa.RSAPrivateKey
    issued: list[str] = field(default_factory=list)  # the scopes asked for

    def token(self, cert: x509.Certificate, scope: str) -> str:
        _, name, actions = scope.split(":")
        now = int(time.time())
        header = {
            "typ": "JWT",
            "alg": "RS256",
            "x5c": [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()],
        }
        claims = {
            "iss": ISSUER, "sub": self.user, "aud": SERVICE, "exp": now + 300,
            "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex,
            "access": [{"type": "repository", "name": name, "actions": actions.split(",")}],
        }  # fmt: skip
        signed = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        signature = self.key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{b64url(signature)}"


@dataclass(frozen=True)
class TokenBed:
    bed: Bed
    tokens: Tokens


def serve_tokens(
    tokens: Tokens, cert: x509.Certificate, port: int, tls: Path
) -> ThreadingHTTPServer:
    """The token service on 127.0.0.1:port, HTTPS with the registry's certificate."""
    basic = "Basic " + base64.b64encode(f"{tokens.user}:{tokens.password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if self.headers.get("Authorization") != basic:
                self.send_response(401)
                self.end_headers()
                return
            scope = query["scope"][0]
            tokens.issued.append(scope)
            body = json.dumps({"token": tokens.token(cert, scope)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def token_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenBed]:
    folder = tmp_path_factory.mktemp("token-registry")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = certificate(key)
    bundle = folder / "tokens.pem"
    bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    port = free_port()
    realm = f"https://127.0.0.1:{port}/token"
    token_auth = {
        "realm": realm,
        "service": SERVICE,
        "issuer": ISSUER,
        "rootcertbundle": str(bundle),
    }
    with running_registry(folder, {"token": token_auth}) as bed:
        tokens = Tokens(bed.registry.username, bed.registry.password, key)
        server = serve_tokens(tokens, cert, port, folder / "conf")
        try:
            yield TokenBed(bed, tokens)
        finally:
            server.shutdown()


def test_push_and_pull_answer_the_bearer_challenge_with_a_token(
    token_bed: TokenBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = f"{token_bed.bed.registry.address}/caches/t{uuid.uuid4().hex[:8]}"
    bed = token_bed.bed
    options = ["--auth-file", str(bed.auth_file), "--ca-file", bed.registry.ca]
    source = compiled(tmp_path / "a")
    assert main(["cache", "push", repository, *options, str(tmp_path / "a")]) == 0, (
        capsys.readouterr().err
    )
    (tmp_path / "b").mkdir()
    assert main(["cache", "pull", repository, *options, str(tmp_path / "b"), KEY]) == 0, (
        capsys.readouterr().err
    )
    assert files_of(tmp_path / "b" / KEY) == files_of(source)
    path = repository.split("/", 1)[1]
    assert token_bed.tokens.issued == [f"repository:{path}:pull,push"] * 2  # once per client

    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"auths": {bed.registry.address: {"auth": "c3B5cmU6eA=="}}}))
    assert main(["cache", "ls", repository, "--auth-file", str(wrong), *options[2:]]) == 1
    assert "answered a token request to https://127.0.0.1:" in capsys.readouterr().err
