"""The CPU serving image (sendnn-inference) for arm64, run for real under emulation: its
layers stacked, chrooted, as uid 2000 with the image's environment, on an aarch64 CPU
emulated by qemu-user-static through binfmt_misc. Its Python imports vLLM, the plugin and
spyre_runtime, the entrypoint runs spyre-runtime, and inductor compiles with the image's
g++. A whole `vllm serve` is not started here: an emulated engine start takes far longer
than a test may (the amd64 image serves in the node stories). Built once and cached."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from test_images import INDUCTOR_COMPILE, as_uid_2000

from spyre_devcluster.images import emulation, recipes, rootfs, serving_index
from spyre_devcluster.images.oci import index_bytes
from spyre_devcluster.images.platforms import PLATFORMS
from spyre_devcluster.images.store import Image, ImageBuildError
from spyre_runtime.contract import FLAVOURS

pytestmark = pytest.mark.images
# ~8 GB of wheels and layers and ~8 minutes cold: on request (`pytest -m arm64_serving`),
# kept out of the default run so a cold CI stays inside its disk and time
BUILDS_ARM64 = pytest.mark.arm64_serving
FLAVOUR = "sendnn-inference"
ARM64 = PLATFORMS["arm64"]


@pytest.fixture(scope="module")
def arm64() -> Image:
    if os.geteuid() != 0:
        pytest.skip("building images needs root (overlay mounts, chroot, binfmt_misc)")
    return serving_index.cross(FLAVOUR, ARM64)


def test_only_the_flavours_with_wheels_get_another_architecture() -> None:
    assert serving_index.architectures(FLAVOUR) == ["amd64", "arm64"]
    with pytest.raises(ImageBuildError, match=r"no vllm-spyre CPU serving image for arm64.*"
                       r"vllm 0\.17\.1 has none"):  # fmt: skip
        serving_index.architectures("vllm-spyre", ["arm64"])
    with pytest.raises(ImageBuildError, match="no sendnn-inference CPU serving image for s390x"):
        serving_index.architectures(FLAVOUR, ["s390x"])


@BUILDS_ARM64
def test_the_arm64_image_is_the_containerfiles_with_the_amd64_venvs_releases(
    arm64: Image,
) -> None:
    config = json.loads(arm64.manifest.config_bytes)
    assert (config["os"], config["architecture"]) == ("linux", "arm64")
    assert config["config"]["User"] == "2000"
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/spyre-entrypoint"]
    assert config["config"]["Labels"]["io.spyre-serving.flavour"] == FLAVOUR
    site = arm64.layers[1].dir / "usr/local/lib/python3.11/dist-packages"
    found = (p.name.removesuffix(".dist-info").rpartition("-") for p in site.glob("*.dist-info"))
    pinned = (p.partition("==") for p in serving_index.pins(FLAVOUR))
    assert {normal(n, v) for n, _, v in found} == {normal(n, v) for n, _, v in pinned}


def normal(name: str, version: str) -> tuple[str, str]:
    return re.sub(r"[-_.]+", "_", name).lower(), version


@BUILDS_ARM64
def test_the_arm64_image_imports_vllm_and_the_plugin_emulated(arm64: Image, tmp_path: Path) -> None:
    emulation.ensure(ARM64.machine)
    env = {**arm64.config.env_dict(), "HOME": "/tmp"}
    imports = (
        "import platform, vllm, spyre_runtime, " + FLAVOURS[FLAVOUR].module + "; "
        "print(platform.machine(), vllm.__version__)"
    )
    with (
        rootfs.overlay([x.dir for x in arm64.layers], None, tmp_path) as root,
        rootfs.runnable(root, {}),
    ):
        scratch = rootfs.Mounts(root)  # the pod's writable /tmp (emptyDir)
        scratch.mount(root / "tmp", "-t", "tmpfs", "tmpfs")
        done = {}
        try:
            for name, argv in (
                ("imports", ["python3", "-c", imports]),
                ("entrypoint", [*(arm64.config.entrypoint or ()), "--help"]),
                ("inductor", ["python3", "-c", INDUCTOR_COMPILE]),
            ):
                started = time.monotonic()
                done[name] = subprocess.run(
                    argv,
                    env=env,
                    preexec_fn=lambda: as_uid_2000(root),
                    capture_output=True,
                    text=True,
                    timeout=900,
                    check=False,
                )
                print(f"{name}: {time.monotonic() - started:.0f}s emulated")
        finally:
            scratch.undo()
    for name, proc in done.items():
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-3000:])
    # vLLM logs to stdout too: the print is the last line
    assert done["imports"].stdout.splitlines()[-1].split() == ["aarch64", "0.28.0"]
    assert "usage: spyre-runtime" in done["entrypoint"].stdout + done["entrypoint"].stderr


@BUILDS_ARM64
def test_one_index_holds_the_amd64_and_arm64_stand_ins(arm64: Image) -> None:
    (amd64,) = recipes.build_images([recipes.runtime_recipe(FLAVOUR)])
    index = json.loads(index_bytes([amd64.manifest, arm64.manifest]))
    assert [m["platform"]["architecture"] for m in index["manifests"]] == ["amd64", "arm64"]
    assert amd64.name == arm64.name  # one repository and tag: the index's
