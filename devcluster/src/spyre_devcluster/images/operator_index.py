"""The operator image for every architecture, as one OCI index, built on this CPU.

Each architecture's image is three layers, each cached by its inputs under
$SPYRE_SERVING_CACHE/images/operator-<arch>-{debian,deps,app}/:

    debian  Debian's python3 and its libraries for the architecture, unpacked (foreign.py),
            the standard library byte-compiled
    deps    the operator's dependencies: `pip install --target --platform <its manylinux
            tags> --only-binary=:all:` (wheels for that CPU from PyPI; the exceptions are
            in platforms.py), byte-compiled
    app     the project's wheel, built from what operator/Containerfile COPYs, installed
            the same way with its console scripts

The image config (user, env, entrypoint, cmd) is operator/Containerfile's; its RUN, a pip
install on the target CPU, is done by the cross install above (a pip under qemu takes
minutes per architecture). Nothing of the build runs emulated; the tests run each image
under qemu.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from spyre_devcluster.images import build, debian, foreign, rootfs
from spyre_devcluster.images.oci import ImageConfig
from spyre_devcluster.images.platforms import Platform
from spyre_devcluster.images.recipes import SYSTEM_PATH, checkout
from spyre_devcluster.images.store import (
    REGISTRY,
    Image,
    ImageBuildError,
    Layer,
    building,
    cached,
    final_layer,
    inputs_key,
    locked,
)
from spyre_operator import __version__

NAME = f"{REGISTRY}/operator:{__version__}"
EXTRA = "operator"  # the extra operator/Containerfile installs
# python3 and what a python:slim image has around it (no apt, no dpkg: nothing installs
# into the image after it is built)
PACKAGES = ("python3", "ca-certificates", "base-files", "base-passwd", "netbase", "dash")


def _say(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def site(platform: Platform) -> str:
    """Where Debian's Python looks for locally installed packages."""
    return f"usr/local/lib/python{platform.python}/dist-packages"


@contextmanager
def on_layers(lower: list[Layer], upper: Path, scratch: Path) -> Iterator[Path]:
    """The layers with upper writable on top."""
    with rootfs.overlay([x.dir for x in lower], upper, scratch / "mnt") as merged:
        yield merged


def compile_tree(merged: Path, platform: Platform, folder: str, as_pip: bool = False) -> None:
    """Byte-compile folder (the root filesystem is read-only when the image runs, so
    nothing would be compiled later). Bytecode is the same on every CPU: a host Python of
    the image's version compiles it natively, recording the image's paths. as_pip: files
    that are not Python of this version (templates, examples some wheels ship) are left
    uncompiled, as pip's own compile at install leaves them."""
    python = shutil.which(f"python{platform.python}")
    if python is None:
        raise ImageBuildError(
            f"{platform.name}: no python{platform.python} on PATH to byte-compile the image's "
            f"Python {platform.python} (install it, or set PATH)"
        )
    argv = [python, "-m", "compileall", "-q", "-s", str(merged), "-p", "/", str(merged / folder)]
    print(f"   $ compileall /{folder}", file=sys.stderr, flush=True)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    failed = re.findall(r"^\*\*\* Error compiling '([^']+)'", done.stdout, re.M)
    if done.returncode != 0 and not (as_pip and failed):
        tail = (done.stdout + done.stderr).strip()[-1500:]
        raise ImageBuildError(f"`compileall /{folder}` failed:\n{tail}")
    if failed:
        first = Path(failed[0]).relative_to(merged)
        _say(f"{len(failed)} file(s) not Python {platform.python}, left so: /{first} ...")


def debian_layer(
    platform: Platform,
    slug: str,
    packages: list[str],
    finish: Callable[[Path], None] | None = None,
    finish_key: str = "",
) -> Image:
    """Debian's packages (and their dependencies) for the platform, unpacked, the standard
    library byte-compiled; finish (named by finish_key in the cache key) edits the tree."""
    packages = sorted(set(packages))
    inputs: dict[str, object] = {"suite": platform.suite, "arch": platform.debian}
    inputs["packages"] = packages
    if finish_key:
        inputs["finish"] = finish_key
    key = inputs_key(inputs)
    found = cached(slug, key)
    if found:
        return found
    _say(f"Debian {platform.suite} {platform.debian}: {', '.join(packages)} (unpacked)")
    with building(slug, key) as scratch:
        tree = scratch / "rootfs"
        foreign.rootfs(tree, scratch / "apt", platform.suite, platform.debian, packages)
        shutil.rmtree(scratch / "apt")
        if finish is not None:
            finish(tree)
        compile_tree(tree, platform, f"usr/lib/python{platform.python}")
        config = ImageConfig(env=(("PATH", SYSTEM_PATH), ("LANG", "C.UTF-8")), cmd=("python3",))
        layer = final_layer(scratch, tree)
        image = Image(f"{slug}:{platform.suite}", key, (layer,), config, platform.name)
        image.save(scratch)
    return image


def _debian(platform: Platform) -> Image:
    packages = [*PACKAGES, *(deb for _, deb in platform.from_debian)]
    return debian_layer(platform, f"operator-{platform.name}-debian", packages)


def pip_install(
    target: Path, platform: Platform, args: list[str], env: dict[str, str] | None = None
) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", str(target)]
    debian.checked(
        [*cmd, *wheel_args(platform), *args], f"pip install --platform {platform.machine} ...", env
    )


def wheel_args(platform: Platform) -> list[str]:
    """pip's options that take the wheels of the platform's CPU and Python."""
    args = ["--only-binary=:all:", "--python-version", platform.python, "--implementation", "cp"]
    args += ["--abi", platform.abi, "--abi", "abi3", "--abi", "none"]
    return args + [f"--platform={tag}" for tag in platform.wheel_platforms()]


def install_scripts(merged: Path, platform: Platform) -> None:
    """The console scripts `pip --target` left in the site's bin/ into /usr/local/bin,
    with the image's Python in their `#!` (pip wrote the host's)."""
    found = merged / site(platform) / "bin"
    scripts = merged / "usr/local/bin"
    scripts.mkdir(parents=True, exist_ok=True)
    for script in sorted(found.iterdir()):
        head, _, body = script.read_bytes().partition(b"\n")
        if head.startswith(b"#!") and b"python" in head:
            head = f"#!/usr/bin/python{platform.python}".encode()
            (scripts / script.name).write_bytes(head + b"\n" + body)
            (scripts / script.name).chmod(0o755)
        else:  # a program of the wheel's own (e.g. a binary for the image's CPU)
            shutil.copy2(script, scripts / script.name)
    shutil.rmtree(found)


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def requirements() -> list[str]:
    """The project's dependencies with the operator extra (pyproject.toml)."""
    project = tomllib.loads((checkout() / "pyproject.toml").read_text())["project"]
    found = [*project["dependencies"], *project["optional-dependencies"][EXTRA]]
    if any(";" in r for r in found):
        raise ImageBuildError("a dependency with a marker: the cross install cannot judge it")
    return sorted(r.replace(" ", "") for r in found)


def _floor_met(version: str, requirement: str) -> bool:
    floor = re.search(r">=\s*([0-9][0-9.]*)", requirement)
    if floor is None:
        return True

    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", text)[:3])

    return parts(version) >= parts(floor.group(1))


def _check_from_debian(root: Path, platform: Platform, reqs: list[str]) -> None:
    """What Debian stands in for must meet the project's floor."""
    for name, package in platform.from_debian:
        requirement = next((r for r in reqs if _name(r) == name), None)
        if requirement is None:
            continue
        found = (root / "usr/lib/python3/dist-packages").glob(f"{name}-*.*-info")
        infos = [p.name for p in found if p.suffix in (".dist-info", ".egg-info")]
        version = infos[0][len(name) + 1 :].rsplit(".", 1)[0] if infos else ""
        if not version or not _floor_met(version, requirement):
            raise ImageBuildError(
                f"{platform.name}: Debian's {package} ({version or 'not found'}) does not "
                f"meet {requirement}; change the platform's suite or source in platforms.py"
            )


def _deps(platform: Platform, base: Image, reqs: list[str]) -> Image:
    skipped = {name for name, _ in platform.from_debian}
    wanted = [r for r in reqs if _name(r) not in skipped]
    slug = f"operator-{platform.name}-deps"
    key = inputs_key({"base": base.key, "requirements": wanted, "platform": repr(platform)})
    found = cached(slug, key)
    if found:
        return found
    _say(f"{platform.name}: PyPI wheels for {', '.join(wanted)}")
    with building(slug, key) as scratch:
        pure = scratch / "pure"
        for name, variables in platform.pure:
            for requirement in (r for r in wanted if _name(r) == name):
                cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
                cmd += ["--no-binary", name, "-w", str(pure), requirement]
                debian.checked(cmd, f"pip wheel {requirement}", dict(variables))
        upper = scratch / "layer"
        with on_layers(list(base.layers), upper, scratch) as merged:
            _check_from_debian(merged, platform, reqs)
            links = ["--find-links", str(pure)] if pure.exists() else []
            pip_install(merged / site(platform), platform, [*links, *wanted])
            shutil.rmtree(merged / site(platform) / "bin", ignore_errors=True)
            compile_tree(merged, platform, site(platform))
        shutil.rmtree(scratch / "mnt", ignore_errors=True)
        shutil.rmtree(pure, ignore_errors=True)
        layer = final_layer(scratch, upper)
        image = Image(f"{slug}:{key[:12]}", key, (*base.layers, layer), base.config, platform.name)
        image.save(scratch)
    return image


def _containerfile() -> tuple[build.Plan, str]:
    path = checkout() / "operator" / "Containerfile"
    text = path.read_text()
    runs = [s for s in build.plan(text, {}, ImageConfig()).steps if isinstance(s, build.Run)]
    if not any(f"/tmp/spyre-serving[{EXTRA}]" in " ".join(r.argv) for r in runs):
        raise ImageBuildError(
            f"{path} no longer installs /tmp/spyre-serving[{EXTRA}]: update EXTRA in "
            f"{Path(__file__).name} to what it installs"
        )
    return build.plan(text, {}, ImageConfig()), text


def project_wheel(out: Path, plan: build.Plan) -> Path:
    """The project's wheel, built from exactly what the Containerfile's plan COPYs to
    /tmp/spyre-serving (operator/Containerfile's and image/Containerfile's)."""
    context = checkout()
    with tempfile.TemporaryDirectory(prefix="spyre-operator-wheel-") as tmp:
        for step in plan.steps:
            if isinstance(step, build.Copy):
                build._copy(Path(tmp), context, step)
        source = Path(tmp) / "tmp" / "spyre-serving"
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out)]
        debian.checked([*cmd, str(source)], "pip wheel (the project)")
    return next(out.glob("spyre_serving-*.whl"))


def _app(platform: Platform, deps: Image, wheels: Path, source_key: str) -> Image:
    plan, text = _containerfile()
    slug = f"operator-{platform.name}-app"
    key = inputs_key({"deps": deps.key, "source": source_key, "containerfile": text})
    found = cached(slug, key)
    if found:
        return found
    _say(f"{platform.name}: the operator's wheel")
    with building(slug, key, keep=3) as scratch:
        wheel = next(wheels.glob("spyre_serving-*.whl"), None) or project_wheel(wheels, plan)
        upper = scratch / "layer"
        with on_layers(list(deps.layers), upper, scratch) as merged:
            pip_install(merged / site(platform), platform, ["--no-deps", str(wheel)])
            install_scripts(merged, platform)
            compile_tree(merged, platform, site(platform) + "/spyre_operator")
            compile_tree(merged, platform, site(platform) + "/spyre_runtime")
        shutil.rmtree(scratch / "mnt", ignore_errors=True)
        config = _config(plan.config, deps.config)
        layer = final_layer(scratch, upper)
        image = Image(NAME, key, (*deps.layers, layer), config, platform.name)
        image.save(scratch)
    return image


def _config(stage: ImageConfig, base: ImageConfig) -> ImageConfig:
    """The Containerfile's settings over the base's environment."""
    env = base.env_dict() | stage.env_dict()
    return ImageConfig(
        env=tuple(env.items()),
        user=stage.user,
        entrypoint=stage.entrypoint,
        cmd=stage.cmd,
        workdir=stage.workdir,
        labels=stage.labels,
    )


def build_index(platforms: list[Platform]) -> list[Image]:
    """The operator image for each platform (built, or found cached), in that order."""
    rootfs.require_root("building the operator images")
    plan, _ = _containerfile()
    source_key = build.context_digest(checkout(), plan.steps)
    images = []
    with locked(), tempfile.TemporaryDirectory(prefix="spyre-operator-index-") as wheels:
        for platform in platforms:
            started = time.monotonic()
            deps = _deps(platform, _debian(platform), requirements())
            image = _app(platform, deps, Path(wheels), source_key)
            seconds = time.monotonic() - started
            _say(f"{platform.name}: {image.manifest.digest[:19]} ({seconds:.0f}s)")
            images.append(image)
    return images
