"""The CPU serving image (the stand-in) for more than one architecture, as one OCI index.

amd64 is recipes.runtime(): the host's Python and the flavour's runtime venv. Another CPU
is built the operator index's way (operator_index.py), nothing of it run, three layers
cached under $SPYRE_SERVING_CACHE/images/runtime-<flavour>-<arch>-{debian,deps,app}/:

    debian  Debian's python3 for the architecture, with bash (the entrypoint), g++,
            libc6-dev and the Python headers (inductor's C++ code generation on CPU, as the
            amd64 image's toolchain variant) and the upstream images' user senuser
    deps    exactly the versions the amd64 runtime venv holds (`pip freeze --all` of it, the
            project's editable install left out): `pip install --no-deps --platform <the
            CPU's manylinux tags> --only-binary=:all:`, so both architectures carry the same
            releases; a release with no wheel for the CPU fails the build, named
    app     image/Containerfile's COPYs; its RUN (a pip install of the project on the
            target CPU) done by the cross install, its config as the Containerfile says

Which flavour runs on which CPU is PyPI's doing (checked 2026-11-26): only
sendnn-inference's pins (torch 2.13.0, vllm 0.28.0) have aarch64 wheels; vLLM-Spyre 1.10's
vllm 0.17.1 has none, and PyPI has no torch for ppc64le or s390x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spyre_devcluster.images import build, emulation, recipes, rootfs
from spyre_devcluster.images.operator_index import (
    PACKAGES,
    compile_tree,
    debian_layer,
    install_scripts,
    on_layers,
    pip_install,
    project_wheel,
    site,
    wheel_args,
)
from spyre_devcluster.images.platforms import PLATFORMS, Platform
from spyre_devcluster.images.store import (
    REGISTRY,
    Image,
    ImageBuildError,
    building,
    cached,
    final_layer,
    inputs_key,
    locked,
    remove_tree,
)

# The architectures each flavour's CPU stand-in is built for (PyPI's wheels decide)
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "sendnn-inference": ("amd64", "arm64"),
    "vllm-spyre": ("amd64",),
}
WHY_NOT = (
    "PyPI has aarch64 wheels for sendnn-inference's torch 2.13.0 and vllm 0.28.0 only "
    "(vLLM-Spyre 1.10's vllm 0.17.1 has none) and no torch for ppc64le or s390x"
)
# bash runs image/entrypoint; g++, libc6-dev and the headers are inductor's (recipes.VARIANTS)
SERVING_PACKAGES = ("bash", "coreutils", "g++", "libc6-dev")
INSTALLS = "/tmp/spyre-serving"  # what image/Containerfile's RUN installs


def _say(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def architectures(flavour: str, wanted: list[str] | None = None) -> list[str]:
    """The architectures of the flavour's stand-in, of wanted (default: all it has)."""
    if flavour not in ARCHITECTURES:
        raise ImageBuildError(f"unknown flavour {flavour}: {', '.join(ARCHITECTURES)}")
    have = ARCHITECTURES[flavour]
    missing = [a for a in wanted or [] if a not in have]
    if missing:
        raise ImageBuildError(
            f"no {flavour} CPU serving image for {', '.join(missing)}: it is built for "
            f"{', '.join(have)} ({WHY_NOT})"
        )
    return [a for a in have if wanted is None or a in wanted]


def pins(flavour: str) -> list[str]:
    """`name==version` of everything in the amd64 runtime venv but the project."""
    venv = recipes.runtime_venv(flavour)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [x.strip() for x in done.stdout.splitlines() if x.strip()]
    loose = [x for x in lines if "==" not in x]
    if done.returncode != 0 or loose or not lines:
        raise ImageBuildError(
            f"`pip freeze` of {venv} gave no exact pins "
            f"({(done.stderr or ' '.join(loose))[-300:]}); "
            f"reinstall it: rm -r {venv} && scripts/runtime-env {flavour}"
        )
    return sorted(lines, key=str.lower)


def _pip_error(stderr: str) -> str:
    """pip's ERROR lines (they name the requirement), without its location warnings."""
    errors = [x for x in stderr.splitlines() if x.startswith("ERROR")]
    return " ".join(errors)[-800:] or stderr.strip()[-800:]


def _senuser(tree: Path) -> None:
    """The upstream images' user (recipes.SERVING_USER), home group-writable."""
    line = recipes.SERVING_USER
    _, _, uid, gid, _, home, _ = line.split(":")
    with (tree / "etc" / "passwd").open("a") as passwd:
        passwd.write(line + "\n")
    folder = tree / home.lstrip("/")
    folder.mkdir(parents=True)
    os.chown(folder, int(uid), int(gid))
    os.chmod(folder, 0o775)


def _debian(flavour: str, platform: Platform) -> Image:
    headers = f"libpython{platform.python}-dev"
    packages = [*PACKAGES, *SERVING_PACKAGES, headers]
    slug = f"runtime-{flavour}-{platform.name}-debian"
    return debian_layer(platform, slug, packages, _senuser, recipes.SERVING_USER)


def _deps(flavour: str, platform: Platform, base: Image) -> Image:
    wanted = pins(flavour)
    slug = f"runtime-{flavour}-{platform.name}-deps"
    key = inputs_key({"base": base.key, "pins": wanted, "platform": repr(platform)})
    found = cached(slug, key)
    if found:
        return found
    _say(f"{platform.name}: {len(wanted)} pinned wheels of the {flavour} runtime from PyPI")
    with building(slug, key) as scratch:
        # downloaded apart to measure them; --no-cache-dir: the layer is the cache (a copy
        # in pip's would double the GBs)
        wheels = scratch / "wheels"
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-cache-dir"]
        cmd += ["-d", str(wheels), *wheel_args(platform), *wanted]
        started = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ImageBuildError(
                f"{platform.name}: the {flavour} runtime's pins have no wheel for "
                f"{platform.machine} on the index: {_pip_error(done.stderr)}"
            )
        size = sum(p.stat().st_size for p in wheels.iterdir())
        seconds = time.monotonic() - started
        _say(f"{platform.name}: {size / 1e6:.0f} MB of wheels downloaded in {seconds:.0f}s")
        upper = scratch / "layer"
        with on_layers(list(base.layers), upper, scratch) as merged:
            args = ["--no-deps", "--no-index", "--find-links", str(wheels), *wanted]
            pip_install(merged / site(platform), platform, args)
            install_scripts(merged, platform)
            compile_tree(merged, platform, site(platform), as_pip=True)
        remove_tree(wheels)
        remove_tree(scratch / "mnt")
        layer = final_layer(scratch, upper)
        name = f"{slug}:{key[:12]}"
        image = Image(name, key, (*base.layers, layer), base.config, platform.name)
        image.save(scratch)
    return image


def _plan(flavour: str, base: Image) -> tuple[build.Plan, str]:
    path = recipes.checkout() / "image" / "Containerfile"
    text = path.read_text()
    repository, _, tag = base.name.rpartition(":")
    args = {"BASE_IMAGE": repository, "BASE_TAG": tag, "FLAVOUR": flavour}
    plan = build.plan(text, args, base.config)
    runs = [s for s in plan.steps if isinstance(s, build.Run)]
    if len(runs) != 1 or f"--no-deps {INSTALLS}" not in " ".join(runs[0].argv):
        raise ImageBuildError(
            f"{path}: expected one RUN that pip installs --no-deps {INSTALLS} (the cross "
            f"build does that RUN itself); update {Path(__file__).name} to what it does now"
        )
    return plan, text


def _app(flavour: str, platform: Platform, deps: Image, wheels: Path) -> Image:
    plan, text = _plan(flavour, deps)
    context = recipes.checkout()
    slug = f"runtime-{flavour}-{platform.name}-app"
    source = build.context_digest(context, plan.steps)
    key = inputs_key({"deps": deps.key, "source": source, "containerfile": text})
    found = cached(slug, key)
    if found:
        return found
    _say(f"{platform.name}: image/Containerfile over the {flavour} runtime")
    with building(slug, key, keep=3) as scratch:
        wheel = next(wheels.glob("spyre_serving-*.whl"), None) or project_wheel(wheels, plan)
        upper = scratch / "layer"
        with on_layers(list(deps.layers), upper, scratch) as merged:
            for step in plan.steps:
                if isinstance(step, build.Copy):
                    build._copy(merged, context, step)
            pip_install(merged / site(platform), platform, ["--no-deps", str(wheel)])
            install_scripts(merged, platform)
            remove_tree(merged / INSTALLS.lstrip("/"))
            compile_tree(merged, platform, site(platform) + "/spyre_runtime")
        remove_tree(scratch / "mnt")
        layer = final_layer(scratch, upper)
        name = f"{REGISTRY}/runtime-cpu:{recipes.runtime_tag(flavour)}"
        image = Image(name, key, (*deps.layers, layer), plan.config, platform.name)
        image.save(scratch)
    return image


def cross(flavour: str, platform: Platform) -> Image:
    """The flavour's CPU serving image for a CPU that is not this one."""
    if emulation.native(platform.machine):
        raise ImageBuildError(f"{platform.name} is this CPU: recipes.runtime() builds it")
    architectures(flavour, [platform.name])
    rootfs.require_root("building the serving images")
    deps = _deps(flavour, platform, _debian(flavour, platform))
    with tempfile.TemporaryDirectory(prefix="spyre-serving-wheel-") as wheels:
        return _app(flavour, platform, deps, Path(wheels))


def build_index(flavour: str, wanted: list[str] | None = None) -> list[Image]:
    """The flavour's CPU serving image for each of its architectures (of wanted)."""
    images = []
    for arch in architectures(flavour, wanted):
        started = time.monotonic()
        if emulation.native(PLATFORMS[arch].machine):
            (image,) = recipes.build_images([recipes.runtime_recipe(flavour)])
        else:
            with locked():
                image = cross(flavour, PLATFORMS[arch])
        _say(f"{flavour} {arch}: {image.manifest.digest[:19]} ({time.monotonic() - started:.0f}s)")
        images.append(image)
    return images
