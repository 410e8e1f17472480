"""The local hub's HTTP answers, read with the standard library (the real huggingface_hub
clients against it: tests/runtime/test_runtime_weights.py)."""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spyre_devcluster.hub import LocalHub

pytestmark = pytest.mark.unit

WEIGHTS = bytes(range(256)) * 1024  # 256 KiB


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[LocalHub]:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(WEIGHTS)
    (folder / "config.json").write_text("{}\n")
    (folder / "sub" / "x.txt").write_text("x")
    with LocalHub() as hub:
        hub.add_repo("org/m", folder)
        yield hub


def get(hub: LocalHub, path: str, method: str = "GET", **headers: str) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(hub.url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_model_info_lists_siblings_with_blob_metadata(hub: LocalHub) -> None:
    status, _, body = get(hub, "/api/models/org/m/revision/main?blobs=true")
    info = json.loads(body)
    assert (status, info["id"], info["sha"]) == (200, "org/m", hub.repos["org/m"].refs["main"])
    siblings = {s["rfilename"]: s for s in info["siblings"]}
    assert siblings["model.safetensors"]["lfs"] == {
        "sha256": hashlib.sha256(WEIGHTS).hexdigest(), "size": len(WEIGHTS), "pointerSize": 131,
    }  # fmt: skip
    # git's blob id for the small files: `git hash-object` of "{}\n"
    assert siblings["config.json"]["blobId"] == "0967ef424bce6791893e9a57bb952f80fd536e93"
    status, _, body = get(hub, "/api/models/org/m")
    assert {s["rfilename"] for s in json.loads(body)["siblings"]} == set(siblings)
    assert "size" not in json.loads(body)["siblings"][0]


def test_the_tree_lists_files_and_folders(hub: LocalHub) -> None:
    _, _, body = get(hub, "/api/models/org/m/tree/main?recursive=true")
    assert [(e["type"], e["path"]) for e in json.loads(body)] == [
        ("file", "config.json"), ("file", "model.safetensors"), ("directory", "sub"),
        ("file", "sub/x.txt"),
    ]  # fmt: skip
    _, _, body = get(hub, "/api/models/org/m/tree/main?recursive=false")
    assert [e["path"] for e in json.loads(body)] == ["config.json", "model.safetensors", "sub"]


def test_resolve_sends_the_hub_headers_and_honours_ranges(hub: LocalHub) -> None:
    commit = hub.repos["org/m"].refs["main"]
    status, headers, body = get(hub, "/org/m/resolve/main/model.safetensors", "HEAD")
    assert (status, body) == (200, b"")
    assert headers["X-Repo-Commit"] == commit
    assert headers["X-Linked-Etag"] == f'"{hashlib.sha256(WEIGHTS).hexdigest()}"'
    assert headers["X-Linked-Size"] == str(len(WEIGHTS))
    assert hub.downloads("org/m") == 0
    status, headers, body = get(
        hub, f"/org/m/resolve/{commit}/model.safetensors", Range="bytes=1000-"
    )
    assert (status, headers["Content-Range"], body) == (
        206, f"bytes 1000-{len(WEIGHTS) - 1}/{len(WEIGHTS)}", WEIGHTS[1000:],
    )  # fmt: skip
    status, _, _ = get(hub, "/org/m/resolve/main/model.safetensors", Range=f"bytes={len(WEIGHTS)}-")
    assert status == 416
    assert get(hub, "/org/m/resolve/main/sub/x.txt")[2] == b"x"
    assert hub.file_downloads("org/m") == {"model.safetensors": 1, "sub/x.txt": 1}


@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/api/models/org/none", {}, 401, "RepoNotFound"),
        ("/api/models/org/none", {"Authorization": "Bearer hf_ok"}, 404, "RepoNotFound"),
        ("/api/models/org/m/revision/nope", {}, 404, "RevisionNotFound"),
        ("/org/m/resolve/main/missing.json", {}, 404, "EntryNotFound"),
        ("/org/g/resolve/main/config.json", {}, 401, "GatedRepo"),
        ("/org/g/resolve/main/config.json", {"Authorization": "Bearer hf_ok"}, 403, "GatedRepo"),
        ("/org/m/resolve/main/config.json", {"Authorization": "Bearer hf_bad"}, 401, None),
    ],
)
def test_errors_carry_the_hubs_codes(
    hub: LocalHub, tmp_path: Path, path: str, headers: dict[str, str], status: int, code: str | None
) -> None:
    hub.add_repo("org/g", tmp_path / "model", gated=True)
    hub.grant("hf_ok")
    got, response_headers, _ = get(hub, path, **headers)
    assert (got, response_headers.get("X-Error-Code")) == (status, code)
    hub.grant("hf_ok", "org/g")
    assert get(hub, "/org/g/resolve/main/config.json", Authorization="Bearer hf_ok")[0] == 200


def test_branches_move_and_tags_stay(hub: LocalHub, tmp_path: Path) -> None:
    first = hub.repos["org/m"].refs["main"]
    hub.tag("org/m", "v1", "main")
    (tmp_path / "model" / "config.json").write_text('{"v": 2}\n')
    second = hub.commit("org/m", tmp_path / "model")
    sha = lambda rev: json.loads(get(hub, f"/api/models/org/m/revision/{rev}")[2])["sha"]  # noqa: E731
    assert (sha("main"), sha("v1"), sha(first)) == (second, first, first)


def test_a_corrupted_file_keeps_its_size_but_not_its_bytes(hub: LocalHub) -> None:
    hub.corrupt("org/m", "model.safetensors")
    body = get(hub, "/org/m/resolve/main/model.safetensors")[2]
    assert len(body) == len(WEIGHTS) and body != WEIGHTS


def test_a_pause_holds_the_download_until_released(hub: LocalHub) -> None:
    pause = hub.pause_after("org/m", 100_000)
    result: list[bytes] = []
    reader = threading.Thread(
        target=lambda: result.append(get(hub, "/org/m/resolve/main/model.safetensors")[2])
    )
    reader.start()
    assert pause.reached.wait(30)
    assert hub.repos["org/m"].bytes_served == 100_000
    pause.release()
    reader.join(30)
    assert result == [WEIGHTS]
