"""vLLM's model-info cache kept with the key and given to each pod (modelinfo.py); the
runtime tier's cached starts use it with a fresh HOME (test_runtime_cached_start.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spyre_runtime.modelinfo import SUBDIR, give, keep, vllm_folder

pytestmark = pytest.mark.unit


def test_vllms_folder_follows_its_env_as_vllm_does(tmp_path: Path) -> None:
    home = str(tmp_path)
    assert vllm_folder({"HOME": home}) == tmp_path / ".cache/vllm/modelinfos"
    assert vllm_folder({"HOME": home, "XDG_CACHE_HOME": "/x"}) == Path("/x/vllm/modelinfos")
    both = {"HOME": home, "XDG_CACHE_HOME": "/x", "VLLM_CACHE_ROOT": "~/v"}
    assert vllm_folder(both) == tmp_path / "v/modelinfos"


def test_the_jobs_infos_go_to_the_key_and_from_there_to_a_pod(tmp_path: Path) -> None:
    job, pod, key = tmp_path / "job", tmp_path / "pod", tmp_path / "key"
    infos = vllm_folder({"HOME": str(job)})
    infos.mkdir(parents=True)
    (infos / "granite.json").write_text('{"hash": "1"}')
    (infos / "notes.txt").write_text("not vLLM's")
    assert keep({"HOME": str(job)}, key) == 1
    assert [p.name for p in (key / SUBDIR).iterdir()] == ["granite.json"]

    mine = vllm_folder({"HOME": str(pod)})
    mine.mkdir(parents=True)
    (mine / "granite.json").write_text('{"hash": "2"}')  # the pod's own is kept
    (key / SUBDIR / "roberta.json").write_text('{"hash": "3"}')
    assert give(key, {"HOME": str(pod)}) == 1
    assert (mine / "granite.json").read_text() == '{"hash": "2"}'
    assert (mine / "roberta.json").read_text() == '{"hash": "3"}'


def test_nothing_to_keep_or_give_is_no_error(tmp_path: Path) -> None:
    assert keep({"HOME": str(tmp_path / "none")}, tmp_path / "key") == 0
    assert not (tmp_path / "key").exists()
    assert give(tmp_path / "key", {"HOME": str(tmp_path / "pod")}) == 0
