"""Build one Containerfile stage over a locally built base image.

`plan` turns the Containerfile text into steps and the config changes (pure). `build`
runs the steps in one overlay over the base's layers, so the result is the base's layers
plus one new layer: every COPY and RUN of the stage, with files a RUN deleted gone.
The COPY sources come from the build context minus `.containerignore` patterns.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from spyre_devcluster.images import containerfile as cf
from spyre_devcluster.images import rootfs
from spyre_devcluster.images.oci import ImageConfig
from spyre_devcluster.images.store import Image, ImageBuildError, Layer, new_layer


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # ARG and ENV values set so far in the stage
    user: str
    workdir: str


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    dest: str
    chmod: int | None
    workdir: str


@dataclass(frozen=True)
class Plan:
    base: str
    steps: tuple[Run | Copy, ...]
    config: ImageConfig


def base_ref(text: str, build_args: dict[str, str]) -> str:
    """The FROM image, with the ARGs declared before it substituted."""
    variables: dict[str, str] = {}
    for ins in cf.parse(text):
        if ins.keyword == "FROM":
            return cf.substitute(ins.args.strip(), variables)
        if ins.keyword == "ARG":
            for key, default in cf.pairs(ins, variables):
                variables[key] = build_args.get(key, default)
    raise AssertionError("parse() guarantees a FROM")


def plan(text: str, build_args: dict[str, str], base: ImageConfig) -> Plan:
    """The stage's steps and final config, given the base image's config."""
    instructions = cf.parse(text)
    start = next(i for i, ins in enumerate(instructions) if ins.keyword == "FROM")
    ref = base_ref(text, build_args)
    env = base.env_dict()
    args: dict[str, str] = {}
    config = base
    steps: list[Run | Copy] = []
    for ins in instructions[start + 1 :]:
        variables = {**env, **args}
        if ins.keyword == "ARG":
            for key, default in cf.pairs(ins, variables):
                args[key] = build_args.get(key, default)
        elif ins.keyword == "ENV":
            env.update(cf.pairs(ins, variables))
            config = replace(config, env=tuple(env.items()))
        elif ins.keyword == "LABEL":
            labels = dict(config.labels) | dict(cf.pairs(ins, variables))
            config = replace(config, labels=tuple(sorted(labels.items())))
        elif ins.keyword == "USER":
            config = replace(config, user=cf.substitute(ins.args.strip(), variables))
        elif ins.keyword == "WORKDIR":
            config = replace(config, workdir=cf.substitute(ins.args.strip(), variables))
        elif ins.keyword == "ENTRYPOINT":
            # as with docker: a new ENTRYPOINT drops the CMD inherited from the base
            config = replace(config, entrypoint=cf.exec_form(ins), cmd=None)
        elif ins.keyword == "CMD":
            config = replace(config, cmd=cf.exec_form(ins))
        elif ins.keyword == "COPY":
            sources, dest = cf.copy_paths(ins, variables)
            steps.append(Copy(tuple(sources), dest, cf.parse_chmod(ins), config.workdir))
        elif ins.keyword == "RUN":
            run_env = tuple({**env, **args}.items())
            steps.append(Run(cf.exec_form(ins), run_env, config.user, config.workdir))
        else:
            raise ins.fail("FROM may appear only once")
    return Plan(ref, tuple(steps), config)


def _ignore_patterns(context: Path) -> list[re.Pattern[str]]:
    path = context / ".containerignore"
    if not path.exists():
        return []
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            raise ImageBuildError(f"{path}: exceptions (!{line[1:]}) are not supported")
        regex = re.escape(line.strip("/")).replace(r"\*\*/", "(.*/)?")
        regex = regex.replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        patterns.append(re.compile(regex + "(/.*)?"))
    return patterns


def context_files(context: Path, source: str) -> list[tuple[str, Path]]:
    """(path relative to the source, host path) of every file a COPY source brings."""
    root = (context / source).resolve()
    if not root.is_relative_to(context.resolve()) or not root.exists():
        raise ImageBuildError(f"COPY {source}: no such file in the build context {context}")
    ignore = _ignore_patterns(context)

    def ignored(path: Path) -> bool:
        rel = path.relative_to(context.resolve()).as_posix()
        return any(p.fullmatch(rel) for p in ignore)

    if root.is_file():
        return [] if ignored(root) else [(root.name, root)]
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not ignored(Path(folder, d)))
        for name in sorted(files):
            path = Path(folder, name)
            if not ignored(path):
                found.append((path.relative_to(root).as_posix(), path))
    return found


def context_digest(context: Path, steps: tuple[Run | Copy, ...]) -> str:
    """Identity of everything the COPY steps take from the context."""
    sha = hashlib.sha256()
    for step in steps:
        if isinstance(step, Copy):
            for source in step.sources:
                for rel, path in context_files(context, source):
                    mode = path.stat().st_mode & 0o777
                    sha.update(f"{source}/{rel}\0{mode:o}\0".encode())
                    sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def _copy(merged: Path, context: Path, step: Copy) -> None:
    dest = step.dest if step.dest.startswith("/") else f"{step.workdir or '/'}/{step.dest}"
    target = merged / dest.lstrip("/")
    for source in step.sources:
        is_dir = (context / source).is_dir()
        for rel, path in context_files(context, source):
            into = is_dir or step.dest.endswith("/") or target.is_dir()
            out = target / rel if into else target
            for parent in reversed(out.relative_to(merged).parents):
                (merged / parent).mkdir(mode=0o755, exist_ok=True)
            shutil.copy2(path, out, follow_symlinks=True)
            os.chown(out, 0, 0)
            if step.chmod is not None:
                os.chmod(out, step.chmod)


def build(
    plan_: Plan,
    base: Image,
    context: Path,
    name: str,
    key: str,
    scratch: Path,
    final: Path,
) -> Image:
    """Run the plan's steps over base; the new layer is made in scratch/layer and
    recorded at final/layer (where `store.building` renames scratch to)."""
    rootfs.require_root("building an image from a Containerfile")
    upper = scratch / "layer"
    pip_env = rootfs.host_pip_env()
    with (
        rootfs.overlay([x.dir for x in base.layers], upper, scratch / "mnt") as merged,
        rootfs.runnable(merged, pip_env),
    ):
        for step in plan_.steps:
            if isinstance(step, Copy):
                print(f"   COPY {' '.join(step.sources)} {step.dest}", file=sys.stderr, flush=True)
                _copy(merged, context, step)
                continue
            env = {**pip_env, **dict(step.env)}
            env.setdefault("HOME", "/root" if rootfs.parse_user(step.user)[0] == 0 else "/")
            env.update({k: v for k, v in os.environ.items() if k in rootfs.PROXY_ENV})
            if step.workdir:
                (merged / step.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
            rootfs.run(merged, step.argv, env, step.user, step.workdir)
    layer = new_layer(upper)
    return Image(name, key, (*base.layers, Layer(final / "layer", layer.blob)), plan_.config)
