"""The operator image for every architecture, run for real: each architecture's image (its
layers mounted as containerd would stack them) runs `spyre-operator --version` and
`spyre-operator validate` of every example, chrooted, on that image's own CPU emulated by
qemu-user-static through binfmt_misc, as the image's user with the image's environment.
The images are built once and cached (docs/images.md); a broken one fails here."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ctdlib import private_containerd
from test_registry import running

from spyre_devcluster import registry
from spyre_devcluster.images import emulation, operator_index, recipes, rootfs
from spyre_devcluster.images.containerd import Ctr
from spyre_devcluster.images.oci import MEDIA_INDEX, index_bytes
from spyre_devcluster.images.platforms import PLATFORMS
from spyre_devcluster.images.push import push_index
from spyre_devcluster.images.recipes import checkout
from spyre_devcluster.images.store import Image
from spyre_operator import __version__
from spyre_operator.api import profiles, runtimes
from spyre_operator.api.validation import parse
from spyre_operator.render.pod import pod_spec
from spyre_runtime.contract import IMAGE_UNUSABLE, PLUGIN_GROUP, SPYRE_SERVING_TERMINATION_LOG
from spyre_runtime.inject import inject

pytestmark = pytest.mark.images
__all__ = ["running"]  # the registry fixture of test_registry.py, used here too

EXAMPLES = sorted(p.relative_to(checkout()) for p in (checkout() / "examples").rglob("*.yaml"))


@pytest.fixture(scope="module")
def images() -> list[Image]:
    if os.geteuid() != 0:
        pytest.skip("building images needs root (overlay mounts, chroot, binfmt_misc)")
    return operator_index.build_index(list(PLATFORMS.values()))


@contextlib.contextmanager
def mounted(image: Image, scratch: Path) -> Iterator[Path]:
    """The image's layers stacked, the examples at /examples, /proc."""
    with rootfs.overlay([x.dir for x in image.layers], scratch / "upper", scratch) as merged:
        mounts = rootfs.Mounts(merged)
        try:
            mounts.bind(checkout() / "examples", "/examples")
            mounts.mount(mounts.point("/proc", True), "-t", "proc", "proc")
            yield merged
        finally:
            mounts.undo()


def run(
    root: Path, image: Image, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """argv in the image, as its entrypoint would run it: its user, env (and `env`) and
    workdir."""
    return subprocess.run(
        list(argv),
        env=image.config.env_dict() | (env or {}),
        preexec_fn=rootfs.entering(root, image.config.user, image.config.workdir),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_index_has_one_image_per_architecture(images: list[Image]) -> None:
    index = json.loads(index_bytes([i.manifest for i in images]))
    assert index["mediaType"] == MEDIA_INDEX
    assert sorted(m["platform"]["architecture"] for m in index["manifests"]) == sorted(PLATFORMS)
    for image in images:
        config = json.loads(image.manifest.config_bytes)
        assert (config["os"], config["architecture"]) == ("linux", image.architecture)
        assert config["config"]["User"] == "65532:65532"  # operator/Containerfile's
    assert len({i.manifest.digest for i in images}) == len(PLATFORMS)


@pytest.mark.parametrize("arch", list(PLATFORMS))
def test_each_architectures_image_runs_the_cli_emulated(
    arch: str, images: list[Image], tmp_path: Path
) -> None:
    image = next(i for i in images if i.architecture == arch)
    platform = PLATFORMS[arch]
    emulation.ensure(platform.machine)
    entry = list(image.config.entrypoint or ())
    assert entry == ["spyre-operator"]
    with mounted(image, tmp_path) as root:
        machine = run(root, image, "python3", "-c", "import platform; print(platform.machine())")
        version = run(root, image, *entry, "--version")
        checked = run(root, image, *entry, "validate", *(f"/{p}" for p in EXAMPLES))
    assert machine.stdout.strip() == platform.machine, machine.stderr
    assert version.returncode == 0, version.stderr
    assert __version__ in version.stdout
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for path in EXAMPLES:
        assert f"/{path}: " in checked.stdout, checked.stdout


@pytest.mark.parametrize("arch", list(profiles.ARCHITECTURES))
def test_the_injected_runtime_runs_on_each_architectures_python_emulated(
    arch: str, images: list[Image], tmp_path: Path
) -> None:
    """What the pods of an upstream image do with spyre-runtime, on each Spyre CPU: the
    init container's command in the operator's image, then the copy alone on that CPU's
    Debian Python (-S: no site-packages). It imports, finds its vLLM plugin entry point,
    reads the serving pod's env (the compile config) and prints the vLLM command and env
    it would exec; vLLM and torch are not there, so nothing that imports them runs."""
    image = next(i for i in images if i.architecture == arch)
    emulation.ensure(PLATFORMS[arch].machine)
    doc = yaml.safe_load((checkout() / "examples" / "granite-3.3-8b-ibm-image.yaml").read_text())
    doc["spec"]["runtime"]["architecture"] = arch
    # IBM's tag per architecture (<version>.<arch>): another one is refused by the rules
    doc["spec"]["image"] = doc["spec"]["image"].rsplit(".", 1)[0] + f".{arch}"
    doc["spec"]["model"]["revision"] = "0" * 40
    (container,) = pod_spec(parse(doc).spec, "serve", commit="0" * 40)["containers"]
    pod_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    pod_env |= {runtimes.PYTHONPATH: "/tmp/spyre-runtime", "HOME": "/tmp"}
    plugin = f"import importlib.metadata as m; print(*m.entry_points(group={PLUGIN_GROUP!r}))"
    with mounted(image, tmp_path) as root:
        copied = run(root, image, "python3", "-m", "spyre_runtime.inject", "/tmp/spyre-runtime")
        found = run(root, image, "python3", "-S", "-c", plugin, env=pod_env)
        described = run(root, image, "python3", "-S", "-m", "spyre_runtime", "describe",
                        *container["args"][1:], env=pod_env)  # fmt: skip
    assert copied.returncode == 0, copied.stderr
    assert "spyre_runtime.compilereport:register" in found.stdout, found.stderr
    assert described.returncode == 0, described.stderr
    out = described.stdout
    assert "flavour: sendnn-inference (VLLM_PLUGINS=sendnn_inference" in out, out
    assert "require precompiled: True" in out
    assert "SENDNN_INFERENCE_DYNAMO_BACKEND=sendnn" in out
    assert "serve /models/ibm-granite/granite-3.3-8b-instruct --tensor-parallel-size 1" in out
    device = "VF" if arch == "s390x" else "PF"
    assert {"name": "FLEX_DEVICE", "value": device} in container["env"]


# Every module of the package imported on its own (those of the vLLM commands import
# vLLM and torch inside their functions), deprecations as errors.
IMPORT_ALL = """
import importlib, pkgutil, spyre_runtime
for m in pkgutil.iter_modules(spyre_runtime.__path__):
    if m.name != "__main__":
        importlib.import_module("spyre_runtime." + m.name)
print(spyre_runtime.__file__)
"""


def test_the_injected_runtime_runs_on_the_newest_debian_python(tmp_path: Path) -> None:
    """Debian's newest python3 (3.13; upstream's images have 3.12, the project's 3.11):
    the injected copy compiles and imports there, renders the serving pod's command, and
    refuses to compile in an image without vLLM with the summary the operator shows."""
    if os.geteuid() != 0:
        pytest.skip("building images needs root (debootstrap, overlay mounts, chroot)")
    newest = recipes.debian_newest_python()
    doc = yaml.safe_load((checkout() / "examples" / "granite-3.3-8b-ibm-image.yaml").read_text())
    doc["spec"]["model"]["revision"] = "0" * 40
    spec = parse(doc).spec
    pod_env = {runtimes.PYTHONPATH: "/tmp/spyre-runtime", "HOME": "/tmp"}
    pod_env[SPYRE_SERVING_TERMINATION_LOG] = "/tmp/summary"
    with mounted(newest, tmp_path) as root:
        inject(root / "tmp" / "spyre-runtime")  # the init container's, in the operator image
        version = run(root, newest, "python3", "--version")
        compiled = run(root, newest, "python3", "-m", "compileall", "-q", "/tmp/spyre-runtime")
        imported = run(root, newest, "python3", "-S", "-W", "error::DeprecationWarning",
                       "-c", IMPORT_ALL, env=pod_env)  # fmt: skip
        outs = {}
        for role in ("serve", "precompile"):
            (container,) = pod_spec(spec, role, commit="0" * 40)["containers"]
            env = {e["name"]: e["value"] for e in container["env"] if "value" in e} | pod_env
            args = ["describe", *container["args"][1:]] if role == "serve" else container["args"]
            outs[role] = run(root, newest, "python3", "-S", "-m", "spyre_runtime", *args, env=env)
        summary = json.loads((root / "tmp" / "summary").read_text())
    assert version.stdout.startswith("Python 3.13"), version.stdout
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert imported.stdout.strip() == "/tmp/spyre-runtime/spyre_runtime/__init__.py", imported
    assert outs["serve"].returncode == 0, outs["serve"].stderr
    assert "command: vllm serve /models/ibm-granite/granite-3.3-8b-instruct" in outs["serve"].stdout
    assert outs["precompile"].returncode == 2, outs["precompile"].stderr
    assert summary["reason"] == IMAGE_UNUSABLE
    assert summary["message"].endswith("has no vLLM: name a vLLM-Spyre image in spec.image")


def test_the_index_is_pushed_with_a_tag_per_architecture_that_containerd_runs_as_is(
    images: list[Image], running: registry.Registry, tmp_path: Path
) -> None:
    repository = f"{registry.REPOSITORY_PREFIX}/operator"
    first = push_index(images, running, repository, "1")
    assert not first.already and first.sent > 0
    assert push_index(images, running, repository, "1").already  # one HEAD
    request = urllib.request.Request(
        f"https://{running.address}/v2/{repository}/manifests/1",
        headers={"Accept": MEDIA_INDEX, "Authorization": _basic(running)},
    )
    with urllib.request.urlopen(request, timeout=30, context=running.ssl_context()) as resp:
        index = json.loads(resp.read())
    assert {m["platform"]["architecture"]: m["digest"] for m in index["manifests"]} == {
        i.architecture: i.manifest.digest for i in images
    }
    # containerd takes a tag naming one manifest as it is, whatever its architecture
    arm64 = next(i for i in images if i.architecture == "arm64")
    hosts = tmp_path / "certs.d"
    registry.write_containerd_hosts(running, hosts)
    reference = f"{running.address}/{repository}:1-arm64"
    user = f"{running.username}:{running.password}"
    with private_containerd(tmp_path / "containerd") as socket:
        ctr = Ctr(socket)
        ctr.run("images", "pull", "--hosts-dir", str(hosts), "--user", user, reference)
        assert ctr.image_digest(reference) == arm64.manifest.digest


def _basic(reg: registry.Registry) -> str:
    return "Basic " + base64.b64encode(f"{reg.username}:{reg.password}".encode()).decode()
