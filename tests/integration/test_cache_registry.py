"""`spyre-operator cache ls|push|pull` against the testbed's REAL registry (Debian's
docker-registry with TLS from its own CA and basic auth, spyre_devcluster.registry), no
node: a key pushed from one volume pulls into another whole, and an artifact altered in
the registry's own storage, or tagged for another key, is refused with nothing left ready."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachelib import COMMIT, CONFIG, KEY, Bed, compiled, files_of, running_registry
from spyre_devcluster.controlplane import free_port
from spyre_operator.cli import main
from spyre_runtime import contract
from spyre_runtime.cacheartifact import architecture, canonical_key, check_manifest, tag
from spyre_runtime.cli import main as runtime_main
from spyre_runtime.contract import READY_NAME
from spyre_runtime.ociregistry import Client, Repository
from spyre_runtime.registryjob import publish_ready

pytestmark = pytest.mark.integration

ARCH = architecture()


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    with running_registry(tmp_path_factory.mktemp("registry")) as bed:
        yield bed


@pytest.fixture
def repository(testbed: Bed) -> str:
    """A repository of its own per test."""
    return f"{testbed.registry.address}/caches/t{uuid.uuid4().hex[:8]}"


def cache(testbed: Bed, *args: str, auth_file: Path | None = None) -> int:
    verb, repo, *rest = args
    options = ["--auth-file", str(auth_file or testbed.auth_file), "--ca-file", testbed.registry.ca]
    return main(["cache", verb, repo, *options, *rest])


def test_a_key_pushed_from_one_volume_pulls_into_another_whole(
    testbed: Bed, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = compiled(tmp_path / "a")
    assert cache(testbed, "push", repository, str(tmp_path / "a")) == 0
    pushed = capsys.readouterr().out
    assert f"pushed {repository}:{KEY}-{ARCH} (sha256:" in pushed and "4 files" in pushed
    assert cache(testbed, "push", repository, str(tmp_path / "a"), KEY) == 0
    assert "already there, nothing moved" in capsys.readouterr().out

    assert cache(testbed, "ls", repository) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["TAG", "FLAVOUR", "RUNTIME", "MODEL", "COMMIT", "BYTES"]
    assert listed[1].split() == [
        f"{KEY}-{ARCH}",
        "vllm-spyre",
        "1.10.0",
        "ibm-granite/tiny",
        COMMIT[:12],
        "8040",
    ]

    target = tmp_path / "b"
    target.mkdir()
    assert cache(testbed, "pull", repository, str(target), KEY) == 0
    assert "pulled" in capsys.readouterr().out
    assert files_of(target / KEY) == files_of(source)
    ready = json.loads((target / KEY / READY_NAME).read_text())
    assert ready["pulledFrom"]["reference"] == f"{repository}:{KEY}-{ARCH}"
    assert ready["pulledFrom"]["digest"].startswith("sha256:")
    assert cache(testbed, "pull", repository, str(target), KEY) == 0
    assert "already there" in capsys.readouterr().out


def test_a_missing_key_bad_credentials_and_an_unknown_ca_each_say_so(
    testbed: Bed, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cache(testbed, "pull", repository, str(tmp_path), KEY) == 1
    assert "has no cache of it for this architecture" in capsys.readouterr().err
    wrong = tmp_path / "wrong.json"
    reg = testbed.registry
    wrong.write_text(json.dumps({"auths": {reg.address: {"username": "spyre", "password": "x"}}}))
    assert cache(testbed, "ls", repository, auth_file=wrong) == 1
    assert "HTTP 401 Unauthorized: check the credentials" in capsys.readouterr().err
    assert main(["cache", "ls", repository, "--auth-file", str(testbed.auth_file)]) == 1
    assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err


def blob_file(testbed: Bed, digest: str) -> Path:
    """Where the registry keeps a blob (distribution's filesystem storage)."""
    hex_ = digest.removeprefix("sha256:")
    return testbed.storage / "docker/registry/v2/blobs/sha256" / hex_[:2] / hex_ / "data"


@contextlib.contextmanager
def altered_layer(testbed: Bed, manifest: bytes) -> Iterator[None]:
    """One byte of a graph changed in the registry's storage, put back after: blobs are
    kept once for every repository, so the other tests would pull it too."""
    layer = blob_file(testbed, check_manifest(manifest, KEY, ARCH).tree.digest)
    original = layer.read_bytes()
    data = bytearray(original)
    data[data.index(b"sssss")] = ord("t")
    layer.write_bytes(bytes(data))
    try:
        yield
    finally:
        layer.write_bytes(original)


def pushed(testbed: Bed, repository: str, root: Path) -> tuple[Client, bytes]:
    """Push the test key from a volume at `root`; a client of the repository, the manifest."""
    compiled(root)
    assert cache(testbed, "push", repository, str(root)) == 0
    auth = (testbed.registry.username, testbed.registry.password)
    client = Client(Repository.parse(repository), auth, testbed.registry.ca)
    got = client.manifest(tag(KEY, ARCH), 1 << 20)
    assert got is not None
    return client, got[0]


def test_a_layer_altered_in_the_registrys_storage_is_refused(
    testbed: Bed, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, manifest = pushed(testbed, repository, tmp_path / "a")
    target = tmp_path / "b"
    target.mkdir()
    with altered_layer(testbed, manifest):
        assert cache(testbed, "pull", repository, str(target), KEY) == 1
    assert "it was altered" in capsys.readouterr().err
    assert list(target.iterdir()) == []


def test_an_artifact_tagged_for_another_key_is_refused(
    testbed: Bed, repository: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, manifest = pushed(testbed, repository, tmp_path / "a")
    other = canonical_key({**CONFIG, "model": "someone/else"})
    client.put_manifest(tag(other, ARCH), manifest)  # the same artifact under another key
    target = tmp_path / "b"
    target.mkdir()
    assert cache(testbed, "pull", repository, str(target), other) == 1
    assert f"annotations name key '{KEY}', not {other}" in capsys.readouterr().err
    assert list(target.iterdir()) == []
    assert cache(testbed, "ls", repository) == 0
    assert f"{other}-{ARCH}  -" in capsys.readouterr().out  # listed as refused


def job_env(testbed: Bed, repository: str, root: Path, log: Path) -> dict[str, str]:
    """The env the operator renders for the pull Job and the compile Job."""
    return {
        contract.SPYRE_SERVING_CACHE_ROOT: str(root),
        contract.SPYRE_SERVING_CACHE_KEY: KEY,
        contract.SPYRE_SERVING_TERMINATION_LOG: str(log),
        **testbed.job_env(repository),
    }


def pull_job(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any]]:
    """`spyre-runtime pull` with that env: its exit code and its summary."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = runtime_main(["pull"])
    return code, json.loads(Path(env[contract.SPYRE_SERVING_TERMINATION_LOG]).read_text())


def test_the_compile_publishes_and_the_pull_job_fetches_or_says_why_not(
    testbed: Bed, repository: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    volume_b = tmp_path / "b"
    volume_b.mkdir()
    env_b = job_env(testbed, repository, volume_b, tmp_path / "pull.log")
    code, summary = pull_job(env_b, monkeypatch)
    assert (code, summary["reason"]) == (1, "NotInRegistry")
    assert f"{repository} has no cache of key {KEY}" in summary["message"]

    compiled(tmp_path / "a")
    env_a = job_env(testbed, repository, tmp_path / "a", tmp_path / "compile.log")
    published = publish_ready(env_a, tmp_path / "a", KEY)["published"]
    assert published["reference"] == f"{repository}:{KEY}-{ARCH}" and published["bytes"] > 8040

    code, summary = pull_job(env_b, monkeypatch)
    assert code == 0 and summary["ok"] and summary["cacheKey"] == KEY
    assert summary["pulled"]["digest"] == published["digest"]
    assert summary["pulled"]["bytes"] == published["bytes"]
    assert summary["bytes"] == 8040  # the key's size, from the record the pull verified
    assert files_of(volume_b / KEY) == files_of(tmp_path / "a" / KEY)


def test_a_publish_that_fails_leaves_the_compile_a_success(
    testbed: Bed, repository: str, tmp_path: Path
) -> None:
    compiled(tmp_path)
    env = job_env(testbed, repository, tmp_path, tmp_path / "log")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"auths": {testbed.registry.address: {"auth": "c3B5cmU6eA=="}}}))
    env[contract.SPYRE_SERVING_CACHE_REGISTRY_AUTH] = str(wrong)
    shared = publish_ready(env, tmp_path, KEY)
    assert shared["ok"] and "HTTP 401" in shared["publishProblem"]
    assert publish_ready({}, tmp_path, KEY) == {"ok": True}  # no registry: nothing said


def test_the_pull_job_refuses_a_tampered_artifact_and_an_unreachable_registry(
    testbed: Bed, repository: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, manifest = pushed(testbed, repository, tmp_path / "a")
    volume = tmp_path / "b"
    volume.mkdir()
    env = job_env(testbed, repository, volume, tmp_path / "log")
    with altered_layer(testbed, manifest):
        code, summary = pull_job(env, monkeypatch)
    assert (code, summary["reason"]) == (1, "ArtifactRefused")
    assert "it was altered" in summary["message"] and list(volume.iterdir()) == []
    env[contract.SPYRE_SERVING_CACHE_REGISTRY] = f"127.0.0.1:{free_port()}/caches/x"
    code, summary = pull_job(env, monkeypatch)
    assert (code, summary["reason"]) == (1, "RegistryUnavailable")
    assert "cannot be reached" in summary["message"]
