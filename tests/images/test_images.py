"""The node's images, built for real and imported into a REAL containerd.

A private containerd (its own root, state and socket in a temp folder; CRI settings as
the node uses them) receives the pause and operator images; the operator image then runs
`spyre-operator --version` under runc as its non-root user. The CPU serving image
(12 GB) is checked in its root filesystem: the real entrypoint and the vLLM stack run
as uid 2000, as in a pod. Needs root; the first run builds everything (minutes), later
runs find the images cached.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from ctdlib import private_containerd

from spyre_devcluster.images import build, recipes, rootfs
from spyre_devcluster.images.containerd import GC_ROOT, Ctr, import_image
from spyre_devcluster.images.oci import chain_ids, write_layer
from spyre_devcluster.images.store import Image
from spyre_devcluster.simulate import poll_until

pytestmark = pytest.mark.images


@pytest.fixture(scope="module")
def built() -> dict[str, Image]:
    if os.geteuid() != 0:
        pytest.skip("building images needs root (overlay mounts, chroot, containerd)")
    names = ["pause", "operator"]
    return dict(zip(names, recipes.build_images(names), strict=True))


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with private_containerd(tmp_path_factory.mktemp("containerd")) as socket:
        yield socket


def ctr_out(socket: str, *args: str) -> str:
    return subprocess.run(
        Ctr(socket).cmd(*args), capture_output=True, text=True, check=True, timeout=120
    ).stdout


def test_import_is_listed_and_idempotent(built: dict[str, Image], containerd: str) -> None:
    for image in built.values():
        first = import_image(image, containerd)
        assert not first.already or first.streamed == 0
        again = import_image(image, containerd)
        assert again.already and again.digest == image.manifest.digest
    listed = ctr_out(containerd, "images", "ls", "-q").split()
    assert {recipes.PAUSE, built["operator"].name} <= set(listed)
    # the layers stay runnable with their big blobs dropped: the snapshots are what counts
    checked = ctr_out(containerd, "images", "check")
    line = next(x for x in checked.splitlines() if x.startswith(built["operator"].name))
    assert line.split()[-1] == "true"  # UNPACKED


def test_operator_image_runs_its_command_as_non_root(
    built: dict[str, Image], containerd: str
) -> None:
    import_image(built["operator"], containerd)
    name = built["operator"].name
    out = ctr_out(
        containerd, "run", "--rm", name, "spyre-images-test-op", "sh", "-c",
        "id -u; spyre-operator --version; command -v g++ || echo no-g++",
    )  # fmt: skip
    # the C++ toolchain is the serving image's only
    assert out.split() == ["65532", "spyre-operator", "0.1.0", "no-g++"]
    assert built["operator"].config.entrypoint == ("spyre-operator",)
    assert built["pause"].config.user == "65535:65535"
    assert built["pause"].config.entrypoint == ("/pause",)


def test_serving_image_runs_the_real_entrypoint_and_vllm_as_uid_2000(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("building images needs root (overlay mounts, chroot)")
    (image,) = recipes.build_images(["runtime-cpu"])
    assert image.config.user == "2000"
    env = {**image.config.env_dict(), "HOME": "/tmp"}
    lower = [layer.dir for layer in image.layers]
    with rootfs.overlay(lower, None, tmp_path) as root, rootfs.runnable(root, {}):
        scratch = rootfs.Mounts(root)  # the pod's writable /tmp (emptyDir)
        scratch.mount(root / "tmp", "-t", "tmpfs", "tmpfs")
        # the project is installed for real in the image, not as an editable pointer
        site = next((root / env["VIRTUAL_ENV"].lstrip("/")).glob("lib/python*/site-packages"))
        assert (site / "spyre_runtime" / "cli.py").is_file()
        assert not list(site.glob("_editable_impl_spyre_serving*"))
        home = (root / "home" / "senuser").stat()
        assert (home.st_uid, home.st_gid, home.st_mode & 0o777) == (2000, 0, 0o775)
        for argv in (
            [*(image.config.entrypoint or ()), "--help"],
            ["python", "-c", "import vllm, sendnn_inference, spyre_runtime"],
            # uid 2000 has a name, as in the upstream image (getpass needs one)
            ["sh", "-c", 'test "$(id -un)" = senuser'],
            # inductor's C++ code generation: g++ and the Python headers (backend inductor)
            ["python", "-c", INDUCTOR_COMPILE],
        ):
            proc = subprocess.run(
                argv,
                env=env,
                preexec_fn=lambda: as_uid_2000(root),
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-3000:])
        scratch.undo()


INDUCTOR_COMPILE = (
    "import torch; f = torch.compile(lambda x: x.sin() + 1, backend='inductor'); "
    "assert torch.allclose(f(torch.ones(8)), torch.ones(8).sin() + 1)"
)


def as_uid_2000(root: Path) -> None:
    os.chroot(root)
    os.chdir("/")
    os.setgroups([])
    os.setgid(0)  # group 0, as the upstream image's senuser
    os.setuid(2000)


def test_files_a_step_deletes_become_whiteouts(
    built: dict[str, Image], containerd: str, tmp_path: Path
) -> None:
    """A RUN that deletes base files, or replaces a folder, gives OCI whiteouts that
    containerd applies: the files are gone in the container."""
    name = "localhost/spyre-serving/whiteout-test:1"
    run = "rm /etc/debian_version && rm -rf /usr/share/doc && mkdir /usr/share/doc"
    run += " && touch /usr/share/doc/new"
    image = derived(built["operator"], tmp_path, name, run)
    out = io.BytesIO()
    write_layer(image.layers[-1].dir, out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        names = tar.getnames()
    assert "etc/.wh.debian_version" in names
    assert "usr/share/doc/.wh..wh..opq" in names and "usr/share/doc/new" in names
    import_image(image, containerd)
    listing = ctr_out(
        containerd, "run", "--rm", name, "spyre-images-test-wh", "sh", "-c",
        "test ! -e /etc/debian_version && ls /usr/share/doc",
    )  # fmt: skip
    assert listing.split() == ["new"]


def derived(base: Image, tmp_path: Path, name: str, run: str) -> Image:
    """An image built from base with one more RUN (as root) through the real builder."""
    plan = build.plan(f"FROM base\nUSER 0\nRUN {run}\n", {}, base.config)
    scratch = tmp_path / name.rpartition(":")[2]
    scratch.mkdir()
    return build.build(plan, base, tmp_path, name, "test", scratch, scratch)


def test_a_new_version_replaces_the_old_one_and_frees_its_layers(
    built: dict[str, Image], containerd: str, tmp_path: Path
) -> None:
    ctr = Ctr(containerd)
    first = derived(built["operator"], tmp_path, "localhost/spyre-serving/versions:v1", "touch /a")
    first = replace(first, name="localhost/spyre-serving/versions:test")
    import_image(first, containerd)
    # the CRI plugin records the image under its config digest too (asynchronously)
    poll_until(
        lambda: list(ctr.images().values()).count(first.manifest.digest) >= 2,
        "the CRI plugin recorded the image under both names",
        30,
        interval=0.1,
    )
    second = derived(built["operator"], tmp_path, "localhost/spyre-serving/versions:v2", "touch /b")
    second = replace(second, name=first.name)
    import_image(second, containerd)
    assert first.manifest.digest not in ctr.images().values()
    assert chain_ids(first.manifest.layers)[-1] not in ctr.snapshots()
    assert chain_ids(second.manifest.layers)[-1] in ctr.snapshots()


def test_a_new_version_builds_on_the_old_layers_while_containerd_collects(
    built: dict[str, Image], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The import leaves out the layers containerd has and moves the name before
    unpacking: from that moment only the import keeps the old version's layers. A
    containerd that collects after every change (as a busy one may, at any moment) must
    not delete them under it (CI once failed: "parent snapshot ... does not exist")."""
    old = derived(built["operator"], tmp_path, "localhost/spyre-serving/gc:v1", "touch /a")
    new = derived(old, tmp_path, "localhost/spyre-serving/gc:v2", "touch /b")
    new = replace(new, name=old.name)
    with private_containerd(tmp_path_factory.mktemp("eager-gc"), eager_gc=True) as socket:
        namespace = "spyre-test"  # no CRI plugin records that would keep the layers too
        import_image(old, socket, namespace)
        done = import_image(new, socket, namespace)
        assert done.skipped == len(old.manifest.layers)
        ctr = Ctr(socket, namespace)
        assert ctr.image_digest(old.name) == new.manifest.digest
        chains = chain_ids(new.manifest.layers)
        assert chains[-1] in ctr.snapshots()
        assert GC_ROOT not in ctr.run("snapshots", "info", chains[-2])  # no root left behind


# every C extension of the standard library, Tk's aside (no X11 in a server image)
IMPORT_EXTENSIONS = """
import importlib, pathlib, sysconfig
folder = pathlib.Path(sysconfig.get_path("platstdlib")) / "lib-dynload"
skip = ("_tkinter", "_test", "_ctypes_test", "_xxtest", "xx")
for so in sorted(folder.glob("*.so")):
    name = so.name.split(".")[0]
    if not name.startswith(skip):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            print(name, exc)
"""


def test_the_images_python_finds_all_its_libraries(
    built: dict[str, Image], containerd: str
) -> None:
    import_image(built["operator"], containerd)
    out = ctr_out(
        containerd, "run", "--rm", built["operator"].name, "spyre-images-test-py",
        "python3", "-c", IMPORT_EXTENSIONS,
    )  # fmt: skip
    assert out == ""
