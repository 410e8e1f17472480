"""`spyre-runtime weights` with each flavour's own huggingface_hub (0.36 in vllm-spyre's venv,
2.x in sendnn-inference's), pointed with HF_ENDPOINT at the local hub the test starts
(spyre_devcluster.hub) serving the tiny models. No engine: seconds per test, except
the one that serves a completion from the downloaded directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from rtlib import Result, Runtime, Workload, stop, termination

from spyre_devcluster.hub import LocalHub
from spyre_devcluster.simulate import poll_until
from spyre_runtime.weightstore import MANIFEST_NAME

pytestmark = pytest.mark.runtime

MODEL = "tiny-org/granite"
GATED = "tiny-org/roberta-gated"
TIMEOUT = 120


@dataclass
class Weights:
    """Runs `spyre-runtime weights` as the weights Job would, against one cache root."""

    rt: Runtime
    hub: LocalHub
    root: Path

    def env(self, model: str = MODEL, revision: str | None = None, **extra: str) -> dict[str, str]:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.root.parent / "home"),  # the pod's writable emptyDir
            "HF_ENDPOINT": self.hub.url,
            "SPYRE_SERVING_MODEL_ID": model,
            "SPYRE_SERVING_CACHE_ROOT": str(self.root),
            "SPYRE_SERVING_TERMINATION_LOG": str(self.root.parent / f"term-{uuid.uuid4().hex}"),
            "PYTHONUNBUFFERED": "1",
            # The client's read timeout (10 s) would otherwise end a paused download.
            "HF_HUB_DOWNLOAD_TIMEOUT": "300",
            **extra,
        }
        if revision is not None:
            env["SPYRE_SERVING_MODEL_REVISION"] = revision
        return env

    def run(self, *args: str, **env: Any) -> Result:
        name = f"weights-{uuid.uuid4().hex[:8]}"
        return self.rt.run(name, ["weights", *args], self.env(**env), timeout=TIMEOUT)

    def ok(self, *args: str, **env: Any) -> dict[str, Any]:
        result = self.run(*args, **env)
        assert result.returncode == 0, result.tail()
        assert result.summary and result.summary["ok"], result.tail()
        return result.summary

    def failed(self, reason: str, code: int, *args: str, **env: Any) -> str:
        result = self.run(*args, **env)
        assert (result.returncode, result.summary and result.summary["reason"]) == (code, reason), (
            result.tail()
        )
        assert result.summary is not None
        assert "Traceback" not in result.log, result.tail()
        message: str = result.summary["message"]
        return message

    def dir(self, commit: str, model: str = MODEL) -> Path:
        return self.root / "weights" / model / commit


@pytest.fixture
def hub(runtime: Runtime) -> Iterator[LocalHub]:
    with LocalHub() as hub:
        hub.add_repo(MODEL, runtime.models / "granite")
        yield hub


@pytest.fixture
def weights(runtime: Runtime, hub: LocalHub, tmp_path: Path) -> Weights:
    (tmp_path / "cache").mkdir()
    return Weights(runtime, hub, tmp_path / "cache")


def model_files(folder: Path) -> dict[str, int]:
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()
    }


def assert_ready(weights: Weights, summary: dict[str, Any], source: Path) -> dict[str, Any]:
    """The commit's directory holds exactly the source's files and a matching manifest."""
    final = weights.dir(summary["commit"])
    manifest = json.loads((final / MANIFEST_NAME).read_text())
    files = model_files(source)
    assert {k: v["size"] for k, v in manifest["files"].items()} == files
    assert model_files(final) == {**files, MANIFEST_NAME: (final / MANIFEST_NAME).stat().st_size}
    assert (manifest["id"], manifest["commit"], manifest["bytes"]) == (
        summary["id"], summary["commit"], sum(files.values()),
    )  # fmt: skip
    assert (summary["files"], summary["bytes"]) == (len(files), manifest["bytes"])
    # Readable by the serving pods' group; the model's parents writable by it too.
    assert (final.stat().st_mode & 0o777, (final / "config.json").stat().st_mode & 0o777) == (
        0o755, 0o644,
    )  # fmt: skip
    assert weights.dir("").stat().st_mode & 0o2070 == 0o2070
    assert not list(final.parent.glob(".partial-*/"))
    return manifest


def test_a_branch_resolves_to_its_commit_and_each_commit_is_downloaded_once(
    weights: Weights, hub: LocalHub, runtime: Runtime, tmp_path: Path
) -> None:
    first = hub.repos[MODEL].refs["main"]
    # A second commit moves main: the download is named by the commit main points at now.
    second_folder = tmp_path / "granite-v2"
    shutil.copytree(runtime.models / "granite", second_folder)
    (second_folder / "README.md").write_text("second commit\n")
    second = hub.commit(MODEL, second_folder)

    summary = weights.ok(revision="main")
    assert (summary["revision"], summary["commit"], summary["downloaded"]) == ("main", second, True)
    assert_ready(weights, summary, second_folder)
    downloads = hub.downloads(MODEL)
    assert set(hub.file_downloads(MODEL).values()) == {1}

    # The same commit again, by branch, by commit and by tag: nothing is downloaded.
    hub.tag(MODEL, "v2", second)
    for revision in ("main", second, "v2"):
        again = weights.ok(revision=revision)
        assert (again["commit"], again["downloaded"]) == (second, False)
    assert hub.downloads(MODEL) == downloads

    # The older commit gets a directory of its own beside it.
    old = weights.ok(revision=first)
    assert (old["commit"], old["downloaded"]) == (first, True)
    assert_ready(weights, old, runtime.models / "granite")
    assert sorted(
        p.name for p in weights.dir("").iterdir() if not p.name.startswith(".")
    ) == sorted([first, second])


def test_a_download_killed_halfway_never_looks_ready_and_a_rerun_completes(
    weights: Weights, hub: LocalHub, runtime: Runtime
) -> None:
    commit = hub.repos[MODEL].refs["main"]
    total = sum(model_files(runtime.models / "granite").values())
    pause = hub.pause_after(MODEL, total // 2)  # inside model.safetensors, most of the bytes
    env = weights.env()
    proc = runtime.start("weights-killed", ["weights"], env)
    try:
        assert pause.reached.wait(TIMEOUT), runtime.log("weights-killed")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        stop(proc)
    assert not weights.dir(commit).exists()
    assert weights.dir(f".partial-{commit}").is_dir()

    pause.release()
    summary = weights.ok()
    assert (summary["commit"], summary["downloaded"]) == (commit, True)
    assert_ready(weights, summary, runtime.models / "granite")
    # the killed request and the complete one
    assert hub.file_downloads(MODEL)["model.safetensors"] == 2


def test_two_runs_for_one_commit_download_it_once(
    weights: Weights, hub: LocalHub, runtime: Runtime
) -> None:
    """A Job for `main` and one for the commit it points at, as two SpyreModels may start."""
    commit = hub.repos[MODEL].refs["main"]
    pause = hub.pause_after(MODEL, 100_000)
    first_env, second_env = weights.env(revision=commit), weights.env(revision="main")
    first = runtime.start("weights-first", ["weights"], first_env)
    second = None
    try:
        assert pause.reached.wait(TIMEOUT), runtime.log("weights-first")
        second = runtime.start("weights-second", ["weights"], second_env)

        def waits_for_the_lock() -> bool:  # resolved, not ready: waits
            assert second is not None and second.poll() is None, runtime.log("weights-second")
            return "step=lock" in runtime.log("weights-second")

        poll_until(waits_for_the_lock, "the second Job waits for the lock", TIMEOUT, 0.05)
        pause.release()
        assert (first.wait(TIMEOUT), second.wait(TIMEOUT)) == (0, 0)
    finally:
        for proc in (first, second):
            if proc:
                stop(proc)
    summaries = [termination(env) or {} for env in (first_env, second_env)]
    assert [(s["commit"], s["downloaded"]) for s in summaries] == [(commit, True), (commit, False)]
    assert set(hub.file_downloads(MODEL).values()) == {1}


def test_a_corrupted_file_is_a_checksum_mismatch_and_never_ready(
    weights: Weights, hub: LocalHub
) -> None:
    commit = hub.repos[MODEL].refs["main"]
    hub.corrupt(MODEL, "model.safetensors")
    message = weights.failed("ChecksumMismatch", 1)
    sha = hub.repos[MODEL].commits[commit]["model.safetensors"].sha256
    assert f"model.safetensors: sha256 expected {sha}, got " in message
    assert not weights.dir(commit).exists()
    assert not weights.dir(f".partial-{commit}").exists()  # the next run starts clean


def test_a_gated_model_needs_a_token_that_was_granted_access(
    weights: Weights, hub: LocalHub, runtime: Runtime
) -> None:
    commit = hub.add_repo(GATED, runtime.models / "roberta", gated=True)
    hub.grant("hf_granted", GATED)
    hub.grant("hf_other")
    message = weights.failed("GatedModel", 2, model=GATED)
    assert "no token was given: set spec.model.source.hub.tokenSecret to a Secret" in message
    message = weights.failed("GatedModel", 2, model=GATED, HF_TOKEN="hf_other")
    assert "has not been granted access to the gated model" in message
    message = weights.failed("Unauthorized", 2, model=GATED, HF_TOKEN="hf_typo")
    assert f"{hub.url} refused the token (HTTP 401)" in message
    assert hub.downloads(GATED) == 0

    summary = weights.ok(model=GATED, HF_TOKEN="hf_granted")
    assert (summary["commit"], summary["downloaded"]) == (commit, True)
    assert weights.dir(commit, GATED).is_dir()


def test_a_missing_revision_or_model_fails_clearly(weights: Weights, hub: LocalHub) -> None:
    message = weights.failed("RevisionNotFound", 2, revision="no-such-branch")
    assert f"{MODEL} has no revision 'no-such-branch' on {hub.url}" in message
    message = weights.failed("ModelNotFound", 2, model="tiny-org/no-such-model")
    assert f"tiny-org/no-such-model was not found on {hub.url}" in message
    assert not (weights.root / "weights").exists()


def test_a_pinned_commit_on_the_volume_needs_no_hub(weights: Weights, hub: LocalHub) -> None:
    summary = weights.ok()
    hub.stop()
    requests = len(hub.requests)
    again = weights.ok(revision=summary["commit"])
    assert (again["commit"], again["downloaded"]) == (summary["commit"], False)
    assert len(hub.requests) == requests
    # A branch has to be resolved, which needs the hub.
    message = weights.failed("HubUnreachable", 1, revision="main")
    assert f"cannot reach the hub at {hub.url}" in message


def test_from_a_local_copy_preloads_the_volume_without_a_hub(
    weights: Weights, hub: LocalHub, runtime: Runtime
) -> None:
    hub.stop()
    commit = "0123456789abcdef0123456789abcdef01234567"
    source = runtime.models / "granite"
    summary = weights.ok("--from", str(source), revision=commit)
    assert (summary["commit"], summary["downloaded"]) == (commit, True)
    manifest = assert_ready(weights, summary, source)
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    assert weights.ok(revision=commit)["downloaded"] is False  # the Job's own run finds it
    # A copy's commit cannot be resolved from a branch name without the hub.
    message = weights.failed("InvalidConfig", 2, "--from", str(source), revision="main")
    assert "the full 40-character commit" in message


@pytest.mark.parametrize("runtime", ["sendnn-inference"], indirect=True)
def test_serving_from_the_downloaded_directory_never_touches_the_hub(
    weights: Weights, hub: LocalHub, runtime: Runtime, server: Any
) -> None:
    final = weights.dir(weights.ok()["commit"])
    hub.stop()
    model = str(final)
    args = [model, "--max-model-len", "256", "--max-num-seqs", "2",
            "--max-num-batched-tokens", "256"]  # fmt: skip
    config = {"flavour": runtime.flavour, "model": model, "maxModelLen": 256, "maxNumSeqs": 2,
              "maxNumBatchedTokens": 256, "backend": "eager"}  # fmt: skip
    # runtime.env sets HF_HUB_OFFLINE=1, as the operator does in the serving pods.
    port, _ = server(Workload("weights-serve", args, config, {}), weights.root / "graphs", False)
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": model, "prompt": "Hello world", "max_tokens": 4, "ignore_eos": True},
        timeout=300,
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 4
