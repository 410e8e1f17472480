"""The node's registry, for real: Debian's docker-registry with the project's TLS and basic
auth, the project's pusher, and a REAL containerd pulling through containerd's registry
config (the hosts.toml the node's containerd reads) with the account's credentials."""

from __future__ import annotations

import http.client
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from ctdlib import private_containerd

from spyre_devcluster import registry
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.images.containerd import Ctr
from spyre_devcluster.images.push import client, push
from spyre_devcluster.images.store import Image, ImageBuildError
from spyre_devcluster.simulate import poll_until

pytestmark = pytest.mark.images


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[registry.Registry]:
    """A registry on loopback with a storage of its own."""
    registry.install(print)
    folder = tmp_path_factory.mktemp("registry")
    reg, config = registry.configure(folder / "conf", free_port(), folder / "storage")
    with (folder / "registry.log").open("w") as log:
        proc = subprocess.Popen(registry.command(config), stdout=log, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: registry.answers(reg), "the registry answers", 30, interval=0.2)
        yield reg
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _status(url: str, reg: registry.Registry) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10, context=reg.ssl_context()) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_it_serves_tls_from_its_own_ca_and_wants_credentials(running: registry.Registry) -> None:
    assert _status(f"https://{running.address}/v2/", running) == 401
    host, _, port = running.address.rpartition(":")
    conn = http.client.HTTPSConnection(host, int(port), timeout=10)
    with pytest.raises(ssl.SSLCertVerificationError):  # not without its CA
        conn.request("GET", "/v2/")


def test_a_push_sends_what_the_registry_lacks_once(
    running: registry.Registry, pause: Image
) -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    first = push(pause, running, name, "1")
    assert not first.already and first.sent >= pause.size and first.skipped == 0
    assert push(pause, running, name, "1").already  # the tag names this manifest: one HEAD
    retag = push(pause, running, name, "2")  # the same blobs under a new tag
    assert not retag.already and retag.sent == 0 and retag.skipped == 1 + len(pause.layers)
    assert retag.digest == first.digest == pause.manifest.digest
    wrong = replace(running, password="not-it")
    with pytest.raises(ImageBuildError, match="HTTP 401"):
        push(pause, wrong, name, "3")


def test_a_push_to_another_repository_mounts_the_blobs_the_registry_has(
    running: registry.Registry, pause: Image
) -> None:
    first = push(pause, running, f"test-{uuid.uuid4().hex[:8]}", "1")
    elsewhere = f"mirror-{uuid.uuid4().hex[:8]}"
    moved = push(pause, running, elsewhere, "1", prefix="other")  # a release's new path
    assert moved.sent == 0 and moved.skipped == 1 + len(pause.layers)
    assert moved.digest == first.digest
    there = client(running, f"other/{elsewhere}")
    assert all(there.has_blob(layer.blob.digest) for layer in pause.layers)


def test_containerd_pulls_with_the_credentials_and_is_refused_without(
    running: registry.Registry, pause: Image, tmp_path: Path
) -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    reference = push(pause, running, name, "1").reference
    hosts = tmp_path / "certs.d"
    registry.write_containerd_hosts(running, hosts)
    with private_containerd(tmp_path / "containerd") as socket:
        ctr = Ctr(socket)
        pull = ["images", "pull", "--hosts-dir", str(hosts), reference]
        refused = subprocess.run(ctr.cmd(*pull), capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "401 Unauthorized" in refused.stderr
        user = f"{running.username}:{running.password}"
        ctr.run("images", "pull", "--hosts-dir", str(hosts), "--user", user, reference)
        assert ctr.image_digest(reference) == pause.manifest.digest
