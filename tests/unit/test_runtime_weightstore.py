"""The weights layout and checks (spyre_runtime.weightstore) and the parts of
`spyre-runtime weights` that need no hub: bad env, a pinned commit already on the volume."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from spyre_runtime import cli
from spyre_runtime.weights import parse_env
from spyre_runtime.weightstore import (
    MANIFEST_NAME,
    Expected,
    Layout,
    WeightsError,
    digest,
    model_id_problem,
    publish,
    safe_relative,
    select,
    tidy,
    verify,
)

pytestmark = pytest.mark.unit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("model_id", ["ibm-granite/granite-3.3-8b-instruct", "gpt2", "a_b/c.d-e"])
def test_hub_ids_are_accepted(model_id: str) -> None:
    assert model_id_problem(model_id) is None


@pytest.mark.parametrize(
    ("model_id", "problem"),
    [
        ("a/b/c", "more than one '/'"),
        ("../b", "must not start with '-' or '.'"),
        ("org/.hidden", "must not start with '-' or '.'"),
        ("org/-x", "must not start with '-' or '.'"),
        ("org/a..b", "nor contain '..'"),
        ("org/", "'' must be letters"),
        ("org/na me", "must be letters, digits"),
        ("/abs", "'' must be letters"),
    ],
)
def test_ids_that_are_not_safe_paths_are_refused(model_id: str, problem: str) -> None:
    assert problem in (model_id_problem(model_id) or "")


def test_with_safetensors_the_other_weight_formats_are_skipped() -> None:
    repo = ["config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5",
            "flax_model.msgpack", "model.onnx", "original/consolidated.00.pth",
            "model.safetensors.index.json", "tokenizer.json", "q4.gguf"]  # fmt: skip
    assert select(repo) == ["config.json", "model.safetensors", "model.safetensors.index.json",
                            "tokenizer.json"]  # fmt: skip
    # Without safetensors the .bin weights are what vLLM loads: everything is kept.
    assert select(["pytorch_model.bin", "config.json"]) == ["config.json", "pytorch_model.bin"]


@pytest.mark.parametrize(
    ("path", "safe"),
    [("a/b.json", True), ("x", True), ("../x", False), ("/etc/x", False), ("a//b", False),
     ("a/../b", False), ("", False)],
)  # fmt: skip
def test_only_paths_inside_the_directory_are_safe(path: str, safe: bool) -> None:
    assert safe_relative(path) is safe


def test_the_layout_keeps_the_org_as_a_folder(tmp_path: Path) -> None:
    layout = Layout(tmp_path, "org/name")
    assert layout.final(COMMIT) == tmp_path / "weights" / "org" / "name" / COMMIT
    assert layout.partial(COMMIT) == tmp_path / "weights" / "org" / "name" / f".partial-{COMMIT}"
    layout.make_dirs()
    for path in (tmp_path / "weights", tmp_path / "weights" / "org", layout.model_dir):
        assert path.stat().st_mode & 0o7777 == 0o2775, path


def test_digests_are_the_hubs(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello\n")
    assert digest(path, "sha256") == hashlib.sha256(b"hello\n").hexdigest()
    # `git hash-object` of the same content
    assert digest(path, "gitSha1") == "ce013625030ba8dba906f756967f9e9ca394464a"


def model(tmp_path: Path) -> tuple[Path, list[Expected]]:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.safetensors").write_bytes(b"weights")
    (folder / "sub" / "b.json").write_text("{}")
    return folder, [
        Expected("a.safetensors", 7, sha256=hashlib.sha256(b"weights").hexdigest()),
        Expected("sub/b.json", 2, git_sha1=digest(folder / "sub" / "b.json", "gitSha1")),
    ]


def test_verify_names_each_wrong_file(tmp_path: Path) -> None:
    folder, expected = model(tmp_path)
    verify(folder, expected)
    (folder / "a.safetensors").write_bytes(b"weighTs")
    (folder / "sub" / "b.json").write_text("{ }")
    with pytest.raises(WeightsError) as raised:
        verify(folder, expected)
    assert raised.value.reason == "ChecksumMismatch"
    assert f"a.safetensors: sha256 expected {expected[0].sha256}, got " in raised.value.message
    assert "sub/b.json: size expected 2, got 3" in raised.value.message
    (folder / "a.safetensors").unlink()
    with pytest.raises(WeightsError, match=r"a\.safetensors is missing"):
        verify(folder, expected)


def test_publish_renames_and_a_second_publisher_finds_it_ready(tmp_path: Path) -> None:
    layout = Layout(tmp_path, "org/name")
    layout.make_dirs()
    manifest: dict[str, Any] = {"id": "org/name", "commit": COMMIT, "files": {}, "bytes": 0}
    for expect_published in (True, False):
        folder, expected = model(tmp_path)
        (folder / ".cache" / "huggingface").mkdir(parents=True)
        (folder / ".cache" / "huggingface" / "x.metadata").write_text("")
        tidy(folder, [e.path for e in expected])
        assert not (folder / ".cache").exists()
        assert (folder / "a.safetensors").stat().st_mode & 0o777 == 0o644
        folder.rename(layout.partial(COMMIT))
        assert publish(layout, COMMIT, manifest) is expect_published
        assert layout.ready(COMMIT) == manifest
        assert not layout.partial(COMMIT).exists()


def test_a_final_directory_without_manifest_is_not_overwritten(tmp_path: Path) -> None:
    layout = Layout(tmp_path, "name")
    layout.make_dirs()
    layout.final(COMMIT).mkdir()
    (layout.final(COMMIT) / "config.json").write_text("{}")
    layout.partial(COMMIT).mkdir()
    assert layout.ready(COMMIT) is None
    with pytest.raises(WeightsError, match=r"exists without \.spyre-weights\.json"):
        publish(layout, COMMIT, {"commit": COMMIT})


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith(("SPYRE_SERVING_", "HF_")):
            monkeypatch.delenv(name)
    values = {
        "SPYRE_SERVING_MODEL_ID": "org/name",
        "SPYRE_SERVING_CACHE_ROOT": str(tmp_path),
        "SPYRE_SERVING_TERMINATION_LOG": str(tmp_path / "termination-log"),
        "HF_ENDPOINT": "http://127.0.0.1:9",  # nothing listens: any request would fail
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def summary(env: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(Path(env["SPYRE_SERVING_TERMINATION_LOG"]).read_text())
    return result


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SPYRE_SERVING_MODEL_ID", "", "SPYRE_SERVING_MODEL_ID must be set"),
        ("SPYRE_SERVING_MODEL_ID", "../x", "must not start with '-' or '.'"),
        ("SPYRE_SERVING_MODEL_REVISION", "main branch", "is not a branch, tag or commit"),
        ("SPYRE_SERVING_CACHE_ROOT", "/nonexistent", "is not a directory"),
    ],
)
def test_bad_env_is_invalid_config_exit_2(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    assert cli.main(["weights"]) == 2
    result = summary(env)
    assert (result["ok"], result["reason"]) == (False, "InvalidConfig")
    assert message in result["message"]
    assert set(result) == {"ok", "reason", "message", "id", "revision"}


def test_unknown_arguments_are_invalid_config(env: dict[str, str]) -> None:
    assert cli.main(["weights", "--revision", "x"]) == 2
    assert "weights takes only --from DIR" in summary(env)["message"]


def test_a_pinned_commit_on_the_volume_is_ready_without_huggingface_hub(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPYRE_SERVING_MODEL_REVISION", COMMIT)
    final = Layout(tmp_path, "org/name").final(COMMIT)
    final.mkdir(parents=True)
    manifest = {"id": "org/name", "revision": "main", "commit": COMMIT, "bytes": 9,
                "files": {"config.json": {"size": 9, "gitSha1": "x"}}}  # fmt: skip
    (final / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert cli.main(["weights"]) == 0
    result = summary(env)
    assert {k: v for k, v in result.items() if k != "seconds"} == {
        "ok": True, "id": "org/name", "revision": COMMIT, "commit": COMMIT, "bytes": 9,
        "files": 1, "downloaded": False,
    }  # fmt: skip
    assert "huggingface_hub" not in sys.modules


def test_the_default_revision_is_main(env: dict[str, str]) -> None:
    cfg = parse_env(env)
    assert (cfg.revision, cfg.endpoint, cfg.has_token) == ("main", "http://127.0.0.1:9", False)
