"""The OCI writer: deterministic layer tars, the JSON documents, the streamed archive."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from spyre_devcluster.images.oci import (
    ANNOTATION_NAME,
    Blob,
    ImageConfig,
    LayerChanged,
    Manifest,
    chain_ids,
    measure_layer,
    write_archive,
    write_layer,
)

pytestmark = pytest.mark.unit


def tree(root: Path) -> Path:
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    (root / "usr" / "bin" / "tool").chmod(0o755)
    (root / "usr" / "bin" / "alias").symlink_to("tool")
    (root / "etc").mkdir()
    (root / "etc" / "b.conf").write_bytes(b"x" * 1000)
    os.link(root / "etc" / "b.conf", root / "etc" / "a-link.conf")
    (root / "etc" / "secret").write_text("s")
    (root / "etc" / "secret").chmod(0o600)
    return root


def layer_bytes(root: Path) -> bytes:
    out = io.BytesIO()
    write_layer(root, out)
    return out.getvalue()


def test_layer_is_deterministic_sorted_and_keeps_modes(tmp_path: Path) -> None:
    root = tree(tmp_path / "rootfs")
    first = layer_bytes(root)
    assert first == layer_bytes(root)
    blob = measure_layer(root)
    assert blob.size == len(first)
    assert blob.digest == "sha256:" + hashlib.sha256(first).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        names = tar.getnames()
        assert names == [
            "etc",
            "etc/a-link.conf",
            "etc/b.conf",
            "etc/secret",
            "usr",
            "usr/bin",
            "usr/bin/alias",
            "usr/bin/tool",
        ]
        # the second name of one inode is a hard link, not a second copy
        assert members["etc/b.conf"].islnk() and members["etc/b.conf"].linkname == "etc/a-link.conf"
        assert members["usr/bin/alias"].issym() and members["usr/bin/alias"].linkname == "tool"
        assert members["usr/bin/tool"].mode == 0o755
        assert members["etc/secret"].mode == 0o600
        assert {(m.uname, m.gname) for m in members.values()} == {("", "")}
        tool = tar.extractfile("usr/bin/tool")
        assert tool is not None and tool.read() == b"#!/bin/sh\necho hi\n"


def test_changed_content_changes_the_digest(tmp_path: Path) -> None:
    root = tree(tmp_path / "rootfs")
    before = measure_layer(root)
    (root / "etc" / "secret").write_text("t")
    assert measure_layer(root).digest != before.digest


def manifest_of(root: Path, name: str = "localhost/x/app:1.0") -> Manifest:
    config = ImageConfig(
        env=(("PATH", "/usr/bin"),), user="2000", entrypoint=("/usr/bin/tool",), cmd=("run",)
    )
    return Manifest(name, config, (measure_layer(root),))


def test_config_manifest_and_index_reference_each_other(tmp_path: Path) -> None:
    root = tree(tmp_path / "rootfs")
    manifest = manifest_of(root)
    config = json.loads(manifest.config_bytes)
    assert config["config"] == {
        "Env": ["PATH=/usr/bin"],
        "User": "2000",
        "Entrypoint": ["/usr/bin/tool"],
        "Cmd": ["run"],
    }
    assert config["rootfs"]["diff_ids"] == [manifest.layers[0].digest]
    doc = json.loads(manifest.manifest_bytes)
    assert doc["config"]["digest"] == "sha256:" + hashlib.sha256(manifest.config_bytes).hexdigest()
    index = json.loads(manifest.index_bytes())
    entry = index["manifests"][0]
    assert entry["digest"] == manifest.digest
    assert entry["annotations"][ANNOTATION_NAME] == "localhost/x/app:1.0"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "1.0"
    assert ImageConfig.from_json(config["config"]) == manifest.config


def test_chain_ids_follow_the_oci_rule() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    ids = chain_ids((Blob(a, 1), Blob(b, 1)))
    assert ids[0] == a
    assert ids[1] == "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()


def test_archive_streams_every_blob_under_its_digest(tmp_path: Path) -> None:
    root = tree(tmp_path / "rootfs")
    manifest = manifest_of(root)
    out = io.BytesIO()
    write_archive(out, manifest, {manifest.layers[0].digest: root}, frozenset())
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        names = tar.getnames()
        assert names[0] == "oci-layout" and names[-1] == "index.json"
        blobs = [n for n in names if n.startswith("blobs/sha256/")]
        assert len(blobs) == 3  # config, manifest, layer
        for name in blobs:
            member = tar.extractfile(name)
            assert member is not None
            assert hashlib.sha256(member.read()).hexdigest() == name.rsplit("/", 1)[1]


def test_archive_leaves_out_layers_the_importer_has(tmp_path: Path) -> None:
    root = tree(tmp_path / "rootfs")
    manifest = manifest_of(root)
    out = io.BytesIO()
    write_archive(out, manifest, {}, frozenset({manifest.layers[0].digest}))
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        assert f"blobs/{manifest.layers[0].digest.replace(':', '/')}" not in tar.getnames()


def test_a_tree_changed_after_hashing_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path / "rootfs")
    manifest = manifest_of(root)
    (root / "etc" / "new").write_text("late")
    with pytest.raises(LayerChanged, match="changed since it was hashed"):
        write_archive(io.BytesIO(), manifest, {manifest.layers[0].digest: root}, frozenset())
