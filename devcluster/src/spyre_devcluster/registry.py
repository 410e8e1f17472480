"""The node's private OCI registry: Debian's `docker-registry`, with TLS from a CA of its
own and basic auth, the way a cluster pulls from a private registry.

`cluster up --node` starts it on the node's address (NODE_IP, where the host's processes
and the node's pods both reach it) before containerd, which trusts its CA (a hosts.toml
in containerd's registry config folder); the node's images are pushed to it
(local/images/push.py) and the kubelet pulls them with the credentials of a
`kubernetes.io/dockerconfigjson` Secret. Pods that talk to it themselves (the cache pull
and compile Jobs, docs/cache-sharing.md) trust its CA from a Secret (`cache_secret`).
Started without a node (the images and integration tests) it listens on loopback. Its
storage is kept in the cache folder, so an image is pushed once (the ~9 GB CPU serving
image too); the address, certificates and password are new at each `up`.

The package is not installed but unpacked into the cache (`cluster install --node`):
installing it starts a system registry on :5000 (its init script or systemd unit).
"""

from __future__ import annotations

import base64
import datetime
import json
import secrets
import shutil
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster.binaries import cache_root
from spyre_operator.webhook import certs

PACKAGE = "docker-registry"
LOOPBACK = "127.0.0.1"  # without a node: only the host's processes use it
USER = "spyre"
REPOSITORY_PREFIX = "spyre-serving"  # the node's images: <host>/spyre-serving/<name>
CA_NAME = "spyre-node-registry-ca"
STATE = "registry.json"

Log = Callable[[str], None]


class RegistryError(RuntimeError):
    """The registry cannot be installed or started, with what to do."""


def binary() -> Path:
    return cache_root() / "registry" / "bin" / PACKAGE


def storage() -> Path:
    """Blobs and manifests: kept across `up`s, so an image is pushed once."""
    return cache_root() / "registry" / "storage"


def install(log: Log) -> Path:
    """Unpack Debian's docker-registry into the cache (apt-get download + dpkg-deb -x):
    the binary only, no service, no system user."""
    target = binary()
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="spyre-registry-") as work:
        for cmd in (
            ["apt-get", "download", PACKAGE],
            ["sh", "-c", f"dpkg-deb -x {PACKAGE}_*.deb root"],
        ):
            log(f"[registry] $ {' '.join(cmd)}")
            done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RegistryError(
                    f"`{' '.join(cmd)}` failed: {done.stderr.strip()}; check that apt can "
                    "reach the Debian mirror (`apt-get update`)"
                )
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{PACKAGE}.tmp")
        shutil.copy2(Path(work) / "root" / "usr" / "bin" / PACKAGE, tmp)
        tmp.replace(target)  # a half-copied binary never looks installed
    log(f"[registry] installed {target}")
    return target


@dataclass(frozen=True)
class Registry:
    """A running registry: where it listens, the CA that signed its certificate, and the
    one account that may push and pull."""

    address: str  # host:port
    ca: str | None  # path of the CA certificate (PEM); None: the system's
    username: str
    password: str

    def reference(self, name: str, tag: str) -> str:
        return f"{self.address}/{REPOSITORY_PREFIX}/{name}:{tag}"

    def repository(self, name: str) -> str:
        return f"{self.address}/{REPOSITORY_PREFIX}/{name}"

    def docker_config(self) -> dict[str, Any]:
        """The `.dockerconfigjson` of a pull Secret for this registry."""
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        entry = {"username": self.username, "password": self.password, "auth": auth}
        return {"auths": {self.address: entry}}

    def pull_secret(self, name: str, namespace: str) -> dict[str, Any]:
        """A `kubernetes.io/dockerconfigjson` Secret, as `kubectl create secret
        docker-registry` makes it."""
        config = json.dumps(self.docker_config()).encode()
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(config).decode()},
        }

    def cache_secret(self, name: str, namespace: str) -> dict[str, Any]:
        """A Secret for the cache registry's Jobs (docs/cache-sharing.md): the account's
        `.dockerconfigjson` and the CA that signed the registry's certificate, `ca.crt`."""
        ca = Path(self.ca).read_bytes() if self.ca else b""
        data = {".dockerconfigjson": json.dumps(self.docker_config()).encode(), "ca.crt": ca}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items() if v},
        }

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca or None)  # none: the system CAs

    def save(self, folder: Path) -> None:
        path = folder / STATE
        path.write_text(json.dumps(asdict(self), indent=2))
        path.chmod(0o600)

    @classmethod
    def load(cls, folder: Path) -> Registry | None:
        try:
            return cls(**json.loads((folder / STATE).read_text()))
        except (OSError, ValueError, TypeError):
            return None


def _htpasswd(user: str, password: str) -> str:
    """A bcrypt htpasswd line (the only kind the registry reads), by Apache's htpasswd."""
    htpasswd = shutil.which("htpasswd")
    if htpasswd is None:
        raise RegistryError("`htpasswd` not found: `apt-get install apache2-utils`")
    done = subprocess.run(
        [htpasswd, "-niB", user], input=password, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RegistryError(f"htpasswd failed: {done.stderr.strip()}")
    return done.stdout.strip() + "\n"


def configure(
    folder: Path, port: int, blobs: Path | None = None, host: str = LOOPBACK
) -> tuple[Registry, Path]:
    """Write the certificates (for `host`), the htpasswd file and the config for a
    registry on host:port into folder, its storage in `blobs` (default: the cache's,
    kept); returns the registry and its config file (run it with `command`)."""
    blobs = blobs or storage()
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    issued = certs.issue([host], now, ca_name=CA_NAME)
    files = {"ca.crt": issued.ca_cert, "tls.crt": issued.cert, "tls.key": issued.key}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "tls.key").chmod(0o600)
    registry = Registry(f"{host}:{port}", str(folder / "ca.crt"), USER, secrets.token_urlsafe(24))
    (folder / "htpasswd").write_text(_htpasswd(registry.username, registry.password))
    blobs.mkdir(parents=True, exist_ok=True)
    config = {
        "version": "0.1",
        "log": {"level": "info", "fields": {"service": "registry"}},
        "storage": {"filesystem": {"rootdirectory": str(blobs)}},
        "http": {
            "addr": registry.address,
            "secret": secrets.token_hex(16),  # signs upload state; one instance
            "tls": {"certificate": str(folder / "tls.crt"), "key": str(folder / "tls.key")},
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
        "auth": {"htpasswd": {"realm": "spyre-node", "path": str(folder / "htpasswd")}},
    }
    path = folder / "config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    registry.save(folder)
    return registry, path


def command(config: Path) -> list[str]:
    """The registry's command line (its binary from `install`)."""
    return [str(binary()), "serve", str(config)]


def answers(registry: Registry) -> bool:
    """The API answers: /v2/ without credentials is refused with 401 when it is up."""
    request = urllib.request.Request(f"https://{registry.address}/v2/")
    try:
        with urllib.request.urlopen(request, timeout=2, context=registry.ssl_context()):
            return True
    except urllib.error.HTTPError as err:
        return err.code == 401
    except OSError:
        return False


def containerd_hosts(registry: Registry) -> str:
    """containerd's hosts.toml for the registry: pull and resolve over TLS with its CA."""
    server = f"https://{registry.address}"
    return (
        f'server = "{server}"\n\n'
        f'[host."{server}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
        f"  ca = {json.dumps(registry.ca)}\n"
    )


def write_containerd_hosts(registry: Registry, config_path: Path) -> None:
    """The registry's folder in containerd's `config_path` (named host:port)."""
    folder = config_path / registry.address
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts.toml").write_text(containerd_hosts(registry))
