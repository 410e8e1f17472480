"""A key's directory as an OCI artifact: packed the same way every time, received whole or
not at all, and every hostile artifact refused with its reason (nothing left that looks
ready, nothing written outside the staging folder)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cachelib import COMMIT, CONFIG, KEY, compiled, files_of
from spyre_runtime.cacheartifact import (
    ANNOTATION_BYTES,
    ANNOTATION_KEY,
    ANNOTATION_MODEL_COMMIT,
    DEFAULT_LIMITS,
    MEDIA_RECORD,
    MEDIA_TREE,
    Descriptor,
    Limits,
    Refused,
    architecture,
    blob_descriptor,
    build_manifest,
    check_manifest,
    pack,
    tag,
    write_tree,
)
from spyre_runtime.cacheunpack import STAGING, Received, receive
from spyre_runtime.contract import READY_NAME

pytestmark = pytest.mark.unit

ARCH = "amd64"


class Blobs:
    """What a registry would serve: blobs by digest (the tests alter them)."""

    def __init__(self) -> None:
        self.by_digest: dict[str, bytes] = {}

    def add(self, media_type: str, data: bytes) -> Descriptor:
        descriptor = blob_descriptor(media_type, data)
        self.by_digest[descriptor.digest] = data
        return descriptor

    def open(self, descriptor: Descriptor) -> io.BytesIO:
        return io.BytesIO(self.by_digest[descriptor.digest])


def published(key_dir: Path) -> tuple[bytes, Blobs]:
    """The manifest and blobs a push of the key sends."""
    packed = pack(key_dir, key_dir.name, ARCH)
    blobs = Blobs()
    blobs.add(MEDIA_RECORD, packed.record)
    out = io.BytesIO()
    write_tree(key_dir, out)
    assert blobs.add(MEDIA_TREE, out.getvalue()) == packed.tree
    return packed.manifest, blobs


def pull(root: Path, manifest: bytes, blobs: Blobs, limits: Limits = DEFAULT_LIMITS) -> Received:
    artifact = check_manifest(manifest, KEY, ARCH, limits)
    return receive(root, KEY, ARCH, artifact, blobs.open, {"reference": "r"}, limits)


def hostile(
    tmp_path: Path, members: Callable[[tarfile.TarFile], None]
) -> tuple[Path, bytes, Blobs]:
    """An artifact of a real record whose layer holds what `members` adds."""
    source = compiled(tmp_path / "source")
    record = json.loads((source / READY_NAME).read_bytes())
    record["inductorFiles"] = {}
    blobs = Blobs()
    config = blobs.add(MEDIA_RECORD, json.dumps(record).encode())
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        members(tar)
    tree = blobs.add(MEDIA_TREE, out.getvalue())
    root = tmp_path / "volume"
    root.mkdir()
    return root, build_manifest(record, config, tree, ARCH), blobs


def add_file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> tarfile.TarFile:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return tar


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    tar.addfile(info)


def left_behind(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# ----- the round trip ---------------------------------------------------------------------
def test_a_pushed_key_pulls_into_another_volume_with_the_same_files_and_ready_last(
    tmp_path: Path,
) -> None:
    source = compiled(tmp_path / "a")
    manifest, blobs = published(source)
    root = tmp_path / "b"
    root.mkdir()
    got = pull(root, manifest, blobs)
    assert files_of(root / KEY) == files_of(source)
    assert got.files == 4 and got.bytes == sum(len(b) for b in blobs.by_digest.values())
    assert got.written == 8040  # the key's size as the compile's record says
    ready = json.loads((root / KEY / READY_NAME).read_text())
    original = json.loads((source / READY_NAME).read_text())
    assert ready == {**original, "pulledFrom": {"reference": "r"}}
    assert (root / KEY / "inductor" / "kernel.so").stat().st_mode & 0o777 == 0o755
    assert left_behind(root) == [KEY]


def test_the_layer_is_the_same_bytes_for_the_same_files(tmp_path: Path) -> None:
    first = pack(compiled(tmp_path / "a"), KEY, ARCH)
    again = compiled(tmp_path / "b")
    (again / "inductor" / "fx" / "graph.bin").touch()  # a new mtime changes nothing
    assert pack(again, KEY, ARCH) == first


def test_the_annotations_name_what_the_record_says(tmp_path: Path) -> None:
    artifact = check_manifest(pack(compiled(tmp_path), KEY, ARCH).manifest, KEY, ARCH)
    assert artifact.annotations == {
        ANNOTATION_KEY: KEY,
        "dev.spyre.serving.cache.flavour": "vllm-spyre",
        "dev.spyre.serving.cache.runtime-version": "1.10.0",
        "dev.spyre.serving.cache.model": "ibm-granite/tiny",
        ANNOTATION_MODEL_COMMIT: COMMIT,
        "dev.spyre.serving.cache.architecture": ARCH,
        ANNOTATION_BYTES: "8040",
    }
    assert artifact.bytes == 8040
    assert tag(KEY, ARCH) == f"{KEY}-amd64"


def test_architectures_by_their_oci_names() -> None:
    assert [architecture(m) for m in ("x86_64", "aarch64", "ppc64le", "s390x")] == [
        "amd64",
        "arm64",
        "ppc64le",
        "s390x",
    ]
    with pytest.raises(Refused, match="no OCI architecture name for machine 'mips'"):
        architecture("mips")


def test_only_a_ready_key_of_files_and_folders_is_packed(tmp_path: Path) -> None:
    key_dir = compiled(tmp_path)
    (key_dir / "inductor" / "link").symlink_to("/etc/passwd")
    with pytest.raises(Refused, match="link is not a regular file or directory"):
        pack(key_dir, KEY, ARCH)
    (key_dir / "inductor" / "link").unlink()
    (key_dir / READY_NAME).unlink()
    with pytest.raises(Refused, match="no READY marker: it is not a finished compile"):
        pack(key_dir, KEY, ARCH)


# ----- hostile artifacts --------------------------------------------------------------------
def test_a_tampered_layer_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    manifest, blobs = published(compiled(tmp_path / "a"))
    artifact = check_manifest(manifest, KEY, ARCH)
    data = bytearray(blobs.by_digest[artifact.tree.digest])
    data[data.index(b"sssss")] = ord("t")  # same size, one byte of a graph changed
    blobs.by_digest[artifact.tree.digest] = bytes(data)
    root = tmp_path / "b"
    root.mkdir()
    with pytest.raises(Refused, match="it was altered"):
        pull(root, manifest, blobs)
    assert left_behind(root) == []


def test_a_tampered_record_is_refused(tmp_path: Path) -> None:
    manifest, blobs = published(compiled(tmp_path / "a"))
    artifact = check_manifest(manifest, KEY, ARCH)
    record = blobs.by_digest[artifact.record.digest]
    blobs.by_digest[artifact.record.digest] = record.replace(b"8040", b"9040")
    with pytest.raises(Refused, match="it was altered"):
        pull(tmp_path, manifest, blobs)


def test_an_artifact_whose_annotations_name_another_key_is_refused(tmp_path: Path) -> None:
    manifest, _ = published(compiled(tmp_path))
    with pytest.raises(Refused, match=f"annotations name key '{KEY}', not {'0' * 64}"):
        check_manifest(manifest, "0" * 64, ARCH)
    with pytest.raises(Refused, match="built on 'amd64', this machine is s390x"):
        check_manifest(manifest, KEY, "s390x")


def test_a_record_of_another_key_under_this_keys_annotations_is_refused(tmp_path: Path) -> None:
    other = compiled(tmp_path / "other", {**CONFIG, "model": "someone/else"})
    _, other_blobs = published(other)
    record = json.loads((other / READY_NAME).read_bytes())
    record["cacheKey"] = KEY  # says it is this key, but its config hashes to its own
    blobs = Blobs()
    config = blobs.add(MEDIA_RECORD, json.dumps(record).encode())
    (tree_digest,) = [d for d, b in other_blobs.by_digest.items() if len(b) > 5000]
    tree = blobs.add(MEDIA_TREE, other_blobs.by_digest[tree_digest])
    record_for_annotations = {**record, "config": CONFIG}
    manifest = build_manifest(record_for_annotations, config, tree, ARCH)
    with pytest.raises(Refused, match="config does not hash to the key"):
        pull(tmp_path, manifest, blobs)


def test_annotations_that_disagree_with_the_record_are_refused(tmp_path: Path) -> None:
    manifest, blobs = published(compiled(tmp_path / "a"))
    doc = json.loads(manifest)
    doc["annotations"][ANNOTATION_BYTES] = "1"
    with pytest.raises(Refused, match="bytes is '1', the record says '8040'"):
        pull(tmp_path, json.dumps(doc).encode(), blobs)


@pytest.mark.parametrize(
    ("members", "reason"),
    [
        (lambda t: add_file(t, "../escaped"), "'../escaped', not a plain relative path"),
        (lambda t: add_file(t, "inductor/../../escaped"), "not a plain relative path"),
        (lambda t: add_file(t, "/etc/cron.d/evil"), "an absolute path '/etc/cron.d/evil'"),
        (lambda t: add_special(t, "g", tarfile.SYMTYPE, "/etc"), "a link 'g' -> '/etc'"),
        (lambda t: add_special(t, "h", tarfile.LNKTYPE, "/etc/shadow"), "a link 'h'"),
        (lambda t: add_special(t, "dev", tarfile.CHRTYPE), "a device or fifo 'dev'"),
        (lambda t: add_special(t, "pipe", tarfile.FIFOTYPE), "a device or fifo 'pipe'"),
        (lambda t: add_file(t, READY_NAME, b"{}"), "a READY of its own"),
        (lambda t: add_file(add_file(t, "a"), "a"), "holds 'a' twice"),
    ],
)
def test_a_layer_with_a_path_escape_link_or_device_is_refused(
    tmp_path: Path, members: Callable[[tarfile.TarFile], None], reason: str
) -> None:
    root, manifest, blobs = hostile(tmp_path, members)
    with pytest.raises(Refused, match=reason):
        pull(root, manifest, blobs)
    assert left_behind(root) == []  # the staging folder is gone, no key, no READY
    assert not (tmp_path / "escaped").exists()


def test_a_symlink_then_a_file_through_it_never_writes_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()

    def members(tar: tarfile.TarFile) -> None:
        add_special(tar, "inductor", tarfile.SYMTYPE, str(outside))
        add_file(tar, "inductor/x.so")

    root, manifest, blobs = hostile(tmp_path, members)
    with pytest.raises(Refused, match="a link 'inductor'"):
        pull(root, manifest, blobs)
    assert list(outside.iterdir()) == []


def test_an_oversized_layer_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    manifest, _ = published(compiled(tmp_path / "a"))
    size = check_manifest(manifest, KEY, ARCH).tree.size
    with pytest.raises(Refused, match=f"the layer is {size} bytes, over the cap of 1000"):
        check_manifest(manifest, KEY, ARCH, Limits(tree_bytes=1000))
    with pytest.raises(Refused, match=r"the manifest is .* bytes, over the cap of 100"):
        check_manifest(manifest, KEY, ARCH, Limits(manifest_bytes=100))


def test_a_blob_longer_than_declared_or_with_too_many_files_is_refused(tmp_path: Path) -> None:
    manifest, blobs = published(compiled(tmp_path / "a"))
    artifact = check_manifest(manifest, KEY, ARCH)
    root = tmp_path / "b"
    root.mkdir()
    with pytest.raises(Refused, match="more than 2 files"):
        pull(root, manifest, blobs, Limits(files=2))
    blobs.by_digest[artifact.tree.digest] += b"\0" * 10240
    with pytest.raises(Refused, match=r"longer than the .* bytes its manifest declares"):
        pull(root, manifest, blobs)
    assert left_behind(root) == []


def test_a_layer_lacking_inductor_files_its_record_lists_is_refused(tmp_path: Path) -> None:
    source = compiled(tmp_path / "a")
    record = json.loads((source / READY_NAME).read_bytes())
    record["inductorFiles"]["fx/other.bin"] = 10
    (source / READY_NAME).write_text(json.dumps(record))
    manifest, blobs = published(source)
    root = tmp_path / "b"
    root.mkdir()
    with pytest.raises(Refused, match=r"lacks 1 of the inductor files .*inductor/fx/other.bin"):
        pull(root, manifest, blobs)
    assert left_behind(root) == []


def test_a_pull_cut_short_leaves_nothing_ready_and_the_next_one_completes(
    tmp_path: Path,
) -> None:
    manifest, blobs = published(compiled(tmp_path / "a"))
    artifact = check_manifest(manifest, KEY, ARCH)
    root = tmp_path / "b"
    root.mkdir()
    (root / KEY).mkdir()  # a compile of the key that was killed
    (root / KEY / "half.bin").write_bytes(b"h")

    class Cut(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() > 2048:
                raise ConnectionResetError("the registry went away")
            return super().read(min(size or 512, 512) if size and size > 0 else 512)

    def cut(descriptor: Descriptor) -> io.BytesIO:
        data = blobs.by_digest[descriptor.digest]
        return Cut(data) if descriptor == artifact.tree else io.BytesIO(data)

    with pytest.raises(ConnectionResetError):
        receive(root, KEY, ARCH, artifact, cut, {})
    assert not (root / KEY / READY_NAME).exists()
    assert not [p for p in root.iterdir() if p.name.startswith(STAGING)]  # removed on the way out
    pull(root, manifest, blobs)
    assert (root / KEY / READY_NAME).exists() and not (root / KEY / "half.bin").exists()
    assert left_behind(root) == [KEY]
