"""The project's images, each built once per set of inputs and cached.

    pause                         gcc -static of pause.c; User 65535
    debian:<suite>                debootstrap minbase + the libraries the Python needs
    python:<version>              + the host's Python at its own path (no site-packages)
    operator:<version>            operator/Containerfile, FROM python:3.11-slim -> the above
    debian:<suite>-toolchain      debian:<suite> + g++ (inductor's C++ code generation)
    python:<version>-toolchain    the same Python over it
    runtime-cpu-base:<fl>-<ver>   + a CPU runtime venv from scripts/runtime-env, at its path
    runtime-cpu:<fl>-<ver>        image/Containerfile with BASE_IMAGE/BASE_TAG -> the above
                                  (`runtime-cpu`: sendnn-inference; `runtime-cpu-vllm-spyre`)

The Containerfiles are the real ones from the checkout; only their FROM names are mapped
to the local equivalents. Tags are stable; content changes give a new image ID.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from spyre_devcluster.images import build, debian
from spyre_devcluster.images.oci import ImageConfig
from spyre_devcluster.images.store import (
    REGISTRY,
    Image,
    ImageBuildError,
    building,
    cached,
    final_layer,
    final_path,
    inputs_key,
    link_tree,
    locked,
    tree_fingerprint,
)
from spyre_operator import __version__
from spyre_runtime.contract import FLAVOURS

PAUSE = f"{REGISTRY}/pause:1"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PAUSE_SOURCE = Path(__file__).with_name("pause.c")
# What the operator Containerfile's FROM names, and the Python it must be
OPERATOR_BASE = "python:3.11-slim"
# The user the upstream Spyre base images run as (image/Containerfile: USER 2000): group 0
# and a group-writable home, for platforms that run images under an arbitrary uid.
SERVING_USER = "senuser:x:2000:0:senuser:/home/senuser:/bin/bash"
# Extra Debian packages of a base variant. The runtime's: inductor's C++ code generation on
# CPU (backend inductor, and the sampler helpers vLLM-Spyre compiles with its default
# SIMPLE_COMPILE_BACKEND=inductor, e.g. for logprobs) runs g++ against the Python headers,
# which the Python prefix carries in include/. The operator image stays without them.
TOOLCHAIN = "toolchain"
VARIANTS: dict[str, tuple[str, ...]] = {"": (), TOOLCHAIN: ("g++", "libc6-dev")}


def _say(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def checkout() -> Path:
    """The repository the Containerfiles and build context come from."""
    root = Path(os.environ.get("SPYRE_SERVING_CHECKOUT", Path(__file__).parents[4]))
    if not (root / "operator" / "Containerfile").is_file():
        raise ImageBuildError(
            f"{root} is not a spyre-serving checkout (no operator/Containerfile); "
            "run from a checkout or set SPYRE_SERVING_CHECKOUT"
        )
    return root


def _tool_version(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""


def pause() -> Image:
    key = inputs_key(
        {"pause.c": PAUSE_SOURCE.read_text(), "gcc": _tool_version(["gcc", "--version"])}
    )
    found = cached("pause", key)
    if found:
        return found
    _say("building the pause image (gcc -static)")
    with building("pause", key) as scratch:
        layer = scratch / "layer"
        layer.mkdir(mode=0o755)
        binary = layer / "pause"
        cmd = ["gcc", "-static", "-O2", "-Wall", "-o", str(binary), str(PAUSE_SOURCE)]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise ImageBuildError(
                "gcc -static failed: install gcc and libc6-dev (apt-get install gcc libc6-dev)"
            )
        subprocess.run(["strip", str(binary)], check=False)  # smaller; not required
        config = ImageConfig(user="65535:65535", entrypoint=("/pause",))
        image = Image(PAUSE, key, (final_layer(scratch, layer),), config)
        image.save(scratch)
    return image


def python_prefix() -> Path:
    """The Python the images carry: the installation behind SPYRE_SERVING_PYTHON (default
    python3.11, as scripts/runtime-env uses), kept at its own path (its rpath needs it)."""
    python = os.environ.get("SPYRE_SERVING_PYTHON", "python3.11")
    out = subprocess.run(
        [python, "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise ImageBuildError(f"cannot run {python}: set SPYRE_SERVING_PYTHON to a Python 3.11")
    return Path(out.stdout.strip())


def _suffix(variant: str) -> str:
    return f"-{variant}" if variant else ""


def debian_base(prefix: Path, variant: str = "") -> Image:
    packages = sorted({*debian.library_packages(prefix), *VARIANTS[variant]})
    # each variant its own slug: one slug keeps only its newest key
    return _debootstrapped(f"debian{_suffix(variant)}", debian.host_suite(), packages, variant)


# Debian's newest suite, whose python3 (3.13) the injected runtime is tested on beside the
# images' 3.11 (upstream's images ship 3.12, which no registry reached here has).
NEWEST_SUITE = "trixie"


def debian_newest_python() -> Image:
    """`debian:trixie` with its python3, from the host's Debian mirror."""
    return _debootstrapped(f"debian-{NEWEST_SUITE}", NEWEST_SUITE, ["python3"])


def _debootstrapped(slug: str, suite: str, packages: list[str], variant: str = "") -> Image:
    debian.ensure_debootstrap()
    key = inputs_key(
        {
            "suite": suite,
            "packages": packages,
            "debootstrap": _tool_version(["dpkg-query", "-W", "debootstrap"]),
        }
    )
    found = cached(slug, key)
    if found:
        return found
    _say(f"debootstrap {suite} minbase with {', '.join(packages)} (a minute or two)")
    with building(slug, key) as scratch:
        mirror = debian.host_mirror(debian.host_suite())  # one mirror serves every suite
        debian.debootstrap(scratch / "rootfs", suite, packages, mirror)
        layer = final_layer(scratch, scratch / "rootfs")
        config = ImageConfig(env=(("PATH", SYSTEM_PATH),), cmd=("bash",))
        image = Image(f"{REGISTRY}/debian:{suite}{_suffix(variant)}", key, (layer,), config)
        image.save(scratch)
    return image


def _python_keep(version: str) -> Callable[[str], bool]:
    """The interpreter and standard library without the host's installed packages
    (only pip stays, as in the python:slim images) and without the test suite."""
    site = f"lib/python{version}/site-packages/"

    def keep(rel: str) -> bool:
        if rel.startswith(site):
            return rel[len(site) :].startswith(("pip", "README"))
        if rel.startswith("bin/"):
            return re.match(r"bin/(python|pip|pydoc|idle|2to3)", rel) is not None
        return rel != f"lib/python{version}/test" and not rel.startswith(
            f"lib/python{version}/test/"
        )

    return keep


def _extend(
    base: Image,
    slug: str,
    name: str,
    source: Path,
    keep: Callable[[str], bool],
    env: dict[str, str],
    cmd: tuple[str, ...] | None = None,
    account: str = "",
) -> Image:
    """base plus one layer holding a host tree at its own path (and, given a passwd line,
    that user with its home folder)."""
    key = inputs_key(
        {
            "base": base.key,
            "source": str(source),
            "tree": tree_fingerprint(source, keep),
            "env": env,
            "cmd": cmd,
            "account": account,
        }
    )
    found = cached(slug, key)
    if found:
        return found
    _say(f"making the {name} layer from {source} (hard links) and hashing it")
    with building(slug, key) as scratch:
        link_tree(source, scratch / "layer", keep)
        if account:
            _add_account(base, scratch / "layer", account)
        layer = final_layer(scratch, scratch / "layer")
        merged = base.config.env_dict() | env
        config = ImageConfig(env=tuple(merged.items()), cmd=cmd or base.config.cmd)
        image = Image(name, key, (*base.layers, layer), config)
        image.save(scratch)
    return image


def _add_account(base: Image, layer: Path, line: str) -> None:
    """Add a passwd entry and its home: Python's getpass (vLLM, torch's inductor cache
    dir) fails for a uid that has no name."""
    passwd = next(
        x.dir / "etc/passwd" for x in reversed(base.layers) if (x.dir / "etc/passwd").exists()
    )
    _, _, uid, gid, _, home, _ = line.split(":")
    (layer / "etc").mkdir(mode=0o755, exist_ok=True)
    (layer / "etc" / "passwd").write_text(passwd.read_text() + line + "\n")
    os.chmod(layer / "etc" / "passwd", 0o644)
    folder = layer / home.lstrip("/")
    folder.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    folder.mkdir()
    os.chown(folder, int(uid), int(gid))
    os.chmod(folder, 0o775)


def python_image(prefix: Path, variant: str = "") -> Image:
    version = re.sub(r"^(\d+\.\d+).*", r"\1", prefix.name)
    env = {"PATH": f"{prefix}/bin:{SYSTEM_PATH}", "LANG": "C.UTF-8"}
    image = _extend(
        debian_base(prefix, variant),
        f"python{_suffix(variant)}",
        f"{REGISTRY}/python:{prefix.name}{_suffix(variant)}",
        prefix,
        _python_keep(version),
        env,
        ("python3",),
    )
    return image


def _containerfile(
    slug: str, name: str, path: Path, args: dict[str, str], bases: dict[str, Image]
) -> Image:
    context = checkout()
    text = path.read_text()
    ref = build.base_ref(text, args)
    if ref not in bases:
        raise ImageBuildError(
            f"{path}: FROM {ref} has no local equivalent (known: {', '.join(bases)})"
        )
    base = bases[ref]
    plan = build.plan(text, args, base.config)
    key = inputs_key(
        {
            "containerfile": text,
            "args": args,
            "base": base.key,
            "context": build.context_digest(context, plan.steps),
        }
    )
    found = cached(slug, key)
    if found:
        return found
    _say(f"building {name} from {path.relative_to(context)}")
    with building(slug, key, keep=3) as scratch:
        image = build.build(plan, base, context, name, key, scratch, final_path(scratch, scratch))
        shutil.rmtree(scratch / "mnt", ignore_errors=True)
        image.save(scratch)
    return image


def operator() -> Image:
    python = python_image(python_prefix())
    if not python.name.rpartition(":")[2].startswith("3.11."):
        raise ImageBuildError(f"{OPERATOR_BASE} needs a Python 3.11; {python.name} is not")
    path = checkout() / "operator" / "Containerfile"
    return _containerfile(
        "operator", f"{REGISTRY}/operator:{__version__}", path, {}, {OPERATOR_BASE: python}
    )


def runtime_venv(flavour: str) -> Path:
    """The installed CPU runtime venv of a flavour (scripts/runtime-env owns it; asked
    for the path only, since a full call would re-point its editable install)."""
    script = checkout() / "scripts" / "runtime-env"
    out = subprocess.run(
        [str(script), "--path", flavour], capture_output=True, text=True, check=False
    )
    venv = Path(out.stdout.strip())
    if out.returncode != 0 or not any(venv.glob(".spyre-runtime-env-rev*")):
        raise ImageBuildError(
            f"the {flavour} runtime venv is not installed{f' in {venv}' if venv.name else ''}; "
            f"run `scripts/runtime-env {flavour}` first"
        )
    return venv


def _venv_keep(venv: Path) -> Callable[[str], bool]:
    """The venv without the project's own editable install (it points at a checkout,
    and every `scripts/runtime-env` run re-points it); the Containerfile installs the
    project for real."""
    site = next(venv.glob("lib/python*/site-packages"))
    dropped = {".spyre-runtime-src"}
    for record in site.glob("spyre_serving-*.dist-info/RECORD"):
        dropped.add(str(record.parent.relative_to(venv)))
        for line in record.read_text().splitlines():
            path = os.path.normpath(site / line.split(",")[0])
            dropped.add(os.path.relpath(path, venv))

    def keep(rel: str) -> bool:
        return rel not in dropped and not rel.startswith(
            tuple(d + "/" for d in dropped if d.endswith(".dist-info"))
        )

    return keep


def runtime_tag(flavour: str) -> str:
    return f"{flavour}-{FLAVOURS[flavour].default_version}"


def runtime_base(flavour: str) -> Image:
    venv = runtime_venv(flavour)
    python = python_image(python_prefix(), TOOLCHAIN)
    env = {"PATH": f"{venv}/bin:{python.config.env_dict()['PATH']}", "VIRTUAL_ENV": str(venv)}
    return _extend(
        python,
        f"runtime-base-{flavour}",
        f"{REGISTRY}/runtime-cpu-base:{runtime_tag(flavour)}",
        venv,
        _venv_keep(venv),
        env,
        account=SERVING_USER,
    )


def runtime(flavour: str = "sendnn-inference") -> Image:
    """The CPU serving image: image/Containerfile over the CPU runtime base."""
    if flavour not in FLAVOURS:
        raise ImageBuildError(f"unknown flavour {flavour}: {', '.join(FLAVOURS)}")
    base = runtime_base(flavour)
    repository, _, tag = base.name.rpartition(":")
    args = {"BASE_IMAGE": repository, "BASE_TAG": tag, "FLAVOUR": flavour}
    path = checkout() / "image" / "Containerfile"
    return _containerfile(
        f"runtime-{flavour}",
        f"{REGISTRY}/runtime-cpu:{runtime_tag(flavour)}",
        path,
        args,
        {base.name: base},
    )


def upstream_standin(flavour: str = "sendnn-inference") -> Image:
    """The stand-in of an upstream vLLM-Spyre image, which has no spyre-runtime: the CPU
    runtime base (vLLM and the plugin from PyPI in a venv, no file of spyre_runtime)
    ending as upstream's Containerfile does, `USER 2000` and `vllm serve` as entrypoint
    (the operator's injected runtime replaces it: docs/api.md, "Image profiles")."""
    base = runtime_base(flavour)
    config = dataclasses.replace(base.config, user="2000", entrypoint=("vllm", "serve"))
    name = f"{REGISTRY}/upstream-standin:{runtime_tag(flavour)}"
    return dataclasses.replace(base, name=name, config=config)


# Red Hat's vLLM-Spyre images (UBI 9) as they differ from IBM's: another user and home,
# vLLM in a venv at /opt/vllm first on PATH, an entrypoint script that sources the device
# setup and runs `vllm serve`, and ENV the operator's pods must override (the plugin, HOME,
# the hub switched off: a weights pod needs it on). The uid is not 2000, the pods' fsGroup.
UBI_USER = "vllm:x:1001:0:vllm:/home/vllm:/bin/bash"
UBI_VENV = "/opt/vllm"
UBI_FILES = {
    "etc/profile.d/ibm-aiu-setup.sh": "export SPYRE_STANDIN_DEVICE_SETUP=1\n",
    "usr/local/bin/spyre_entrypoint.sh": (
        "#!/bin/bash\nsource /etc/profile.d/ibm-aiu-setup.sh\n"
        f'source {UBI_VENV}/bin/activate\nexec vllm serve "$@"\n'
    ),
}
UBI_ENV = {
    "HOME": "/home/vllm",
    "VLLM_PLUGINS": "spyre",
    "HF_HUB_OFFLINE": "1",
    "MASTER_ADDR": "localhost",
    "MASTER_PORT": "12355",
}


def ubi_standin(flavour: str = "sendnn-inference") -> Image:
    """The stand-in of Red Hat's UBI-based vLLM-Spyre images: the CPU runtime base with
    their layout (UBI_*), on the flavour the testbed has (Red Hat's carry vllm-spyre)."""
    base = runtime_base(flavour)
    name = f"{REGISTRY}/ubi-standin:{runtime_tag(flavour)}"
    slug = f"ubi-standin-{flavour}"
    key = inputs_key({"base": base.key, "files": UBI_FILES, "env": UBI_ENV, "user": UBI_USER})
    found = cached(slug, key)
    if found:
        return found
    venv = base.config.env_dict()["VIRTUAL_ENV"]
    with building(slug, key) as scratch:
        tree = scratch / "layer"
        for rel, text in UBI_FILES.items():
            (tree / rel).parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            (tree / rel).write_text(text)
            os.chmod(tree / rel, 0o755)
        (tree / UBI_VENV.lstrip("/")).parent.mkdir(mode=0o755, exist_ok=True)
        (tree / UBI_VENV.lstrip("/")).symlink_to(venv)
        _add_account(base, tree, UBI_USER)
        env = base.config.env_dict() | UBI_ENV
        env |= {"VIRTUAL_ENV": UBI_VENV, "PATH": env["PATH"].replace(venv, UBI_VENV)}
        config = ImageConfig(
            env=tuple(env.items()),
            user="1001",
            entrypoint=("/usr/local/bin/spyre_entrypoint.sh",),
            workdir="/home/vllm",
        )
        image = Image(name, key, (*base.layers, final_layer(scratch, tree)), config)
        image.save(scratch)
    return image


def runtime_recipe(flavour: str) -> str:
    """The BUILDERS name of a flavour's CPU serving image."""
    return "runtime-cpu" if flavour == "sendnn-inference" else f"runtime-cpu-{flavour}"


BUILDERS: dict[str, Callable[[], Image]] = {
    "pause": pause,
    "operator": operator,
    "runtime-cpu": runtime,
    "runtime-cpu-vllm-spyre": lambda: runtime("vllm-spyre"),
    "upstream-standin": upstream_standin,
    "ubi-standin": ubi_standin,
}


def build_images(names: list[str]) -> list[Image]:
    """Build (or find cached) the named images, one build at a time per cache."""
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        raise ImageBuildError(f"unknown image {unknown[0]}; known: {', '.join(BUILDERS)}")
    with locked():
        return [BUILDERS[name]() for name in names]
