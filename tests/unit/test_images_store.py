"""The image cache: records, stale bases, and how many keys a slug keeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spyre_devcluster.images import store
from spyre_devcluster.images.oci import ImageConfig

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def images_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPYRE_SERVING_IMAGES", str(tmp_path))
    return tmp_path


def make(
    slug: str, key: str, content: str, base: store.Image | None = None, keep: int = 1
) -> store.Image:
    with store.building(slug, key, keep) as scratch:
        (scratch / "layer").mkdir()
        (scratch / "layer" / "file").write_text(content)
        layer = store.new_layer(scratch / "layer")
        own = store.Layer(store.final_path(scratch, layer.dir), layer.blob)
        layers = (*(base.layers if base else ()), own)
        image = store.Image(f"localhost/x/{slug}:1", key, layers, ImageConfig())
        image.save(scratch)
    return image


def test_an_image_is_found_by_its_key_with_its_base() -> None:
    base = make("base", "k1", "a")
    top = make("top", "t1", "b", base)
    assert store.cached("top", "t1") == top
    assert store.cached("top", "other") is None


def test_a_base_built_again_makes_images_on_it_stale(images_root: Path) -> None:
    base = make("base", "k1", "a")
    make("top", "t1", "b", base)
    store.remove_tree(images_root / "base" / "k1")
    make("base", "k1", "a changed")  # same key, other bytes (e.g. a new debootstrap)
    assert store.cached("top", "t1") is None


def test_a_slug_keeps_its_newest_keys(images_root: Path) -> None:
    for key in ("k1", "k2", "k3", "k4"):
        make("top", key, key, keep=3)
    assert sorted(p.name for p in (images_root / "top").iterdir()) == ["k2", "k3", "k4"]
    make("top", "k5", "k5")
    assert [p.name for p in (images_root / "top").iterdir()] == ["k5"]


def test_a_trees_fingerprint_ignores_what_running_python_adds(tmp_path: Path) -> None:
    tree = tmp_path / "venv"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("x = 1\n")
    os.utime(tree / "pkg", (0, 0))  # the folder older than a second
    before = store.tree_fingerprint(tree)
    # importing pkg.mod writes pkg/__pycache__/mod.*.pyc, which also changes pkg's mtime
    (tree / "pkg" / "__pycache__").mkdir()
    (tree / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert store.tree_fingerprint(tree) == before
    (tree / "pkg" / "mod.py").write_text("x = 22\n")
    assert store.tree_fingerprint(tree) != before
