"""The multi-arch operator image's pure parts: platforms, the index, names."""

from __future__ import annotations

import json

import pytest

from spyre_devcluster.images import foreign
from spyre_devcluster.images.cli import split_reference
from spyre_devcluster.images.oci import MEDIA_INDEX, Blob, ImageConfig, Manifest, index_bytes
from spyre_devcluster.images.platforms import PLATFORMS, parse
from spyre_devcluster.images.store import ImageBuildError

pytestmark = pytest.mark.unit


def test_platforms_parse_in_order_and_name_what_is_known() -> None:
    assert [p.name for p in parse("s390x, linux/arm64")] == ["s390x", "arm64"]
    with pytest.raises(ImageBuildError, match=r"unknown platform 'riscv64'.*amd64, arm64"):
        parse("amd64,riscv64")
    with pytest.raises(ImageBuildError, match="no platform given"):
        parse(" , ")


def test_wheel_tags_cover_every_manylinux_the_suites_glibc_runs() -> None:
    tags = PLATFORMS["ppc64le"].wheel_platforms()
    assert tags[0] == "manylinux_2_17_ppc64le" and "manylinux_2_36_ppc64le" in tags
    assert "manylinux_2_37_ppc64le" not in tags and "manylinux2014_ppc64le" in tags
    assert PLATFORMS["s390x"].abi == "cp311" and PLATFORMS["arm64"].debian == "arm64"
    assert PLATFORMS["ppc64le"].debian == "ppc64el"


def test_the_index_names_one_manifest_per_architecture() -> None:
    layer = (Blob("sha256:" + "0" * 64, 10),)
    manifests = [Manifest("x:1", ImageConfig(), layer, arch) for arch in ("amd64", "s390x")]
    index = json.loads(index_bytes(manifests))
    assert index["mediaType"] == MEDIA_INDEX
    assert [m["platform"] for m in index["manifests"]] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "s390x", "os": "linux"},
    ]
    assert [m["digest"] for m in index["manifests"]] == [m.digest for m in manifests]
    assert json.loads(manifests[1].config_bytes)["architecture"] == "s390x"
    with pytest.raises(ValueError, match="one manifest per architecture"):
        index_bytes([manifests[0], manifests[0]])


def test_push_reference_is_split_with_a_clear_error() -> None:
    assert split_reference("reg.example:5000/spyre-serving/operator:0.1.0") == (
        "reg.example:5000",
        "spyre-serving/operator",
        "0.1.0",
    )
    assert split_reference("quay.io/spyre-serving/operator:1")[0] == "quay.io:443"
    with pytest.raises(ImageBuildError, match="HOST\\[:PORT\\]/REPOSITORY:TAG"):
        split_reference("operator:0.1.0")
    with pytest.raises(ImageBuildError, match="expected"):
        split_reference("reg:5000/operator")


def test_debs_are_unpacked_into_a_merged_usr() -> None:
    assert foreign._merged("./lib/s390x-linux-gnu/libc.so.6") == "usr/lib/s390x-linux-gnu/libc.so.6"
    assert foreign._merged("./bin/dash") == "usr/bin/dash"
    assert foreign._merged("./lib64") == "usr/lib64"
    assert foreign._merged("./usr/bin/python3.11") == "usr/bin/python3.11"
    assert foreign._merged("./library/x") == "library/x"
