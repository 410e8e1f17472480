"""A writable root filesystem over image layers, and running commands inside it.

The layers are overlayfs lower directories; everything a build step writes lands in the
upper directory, which is then the new layer (whiteouts included). Commands run under
chroot with /proc, a minimal /dev, the host's resolv.conf and the host's pip
configuration (its local files bind-mounted read-only at their own paths), so `pip
install` inside behaves as it does on the host. Needs root (mount, chroot).
"""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from spyre_devcluster.images.store import ImageBuildError

DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
PROXY_ENV = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def _sh(*cmd: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageBuildError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()}")


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            f"{what} needs root (overlay mounts, chroot); run it as root, e.g. with sudo"
        )


class Mounts:
    """Mounts made inside a root, undone in reverse order; mount points it had to
    create are removed again, so they leave nothing in the layer."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounted: list[Path] = []
        self.created: list[Path] = []

    def point(self, inside: str, directory: bool) -> Path:
        target = self.root / inside.lstrip("/")
        if target.exists():
            return target
        missing = [p for p in [target, *target.parents] if not p.exists()]
        target.parent.mkdir(parents=True, exist_ok=True)
        if directory:
            target.mkdir()
        else:
            target.touch()
        self.created.extend(reversed(missing))
        return target

    def mount(self, target: Path, *args: str) -> None:
        _sh("mount", *args, str(target))
        self.mounted.append(target)

    def bind(self, source: Path, inside: str, readonly: bool = True) -> None:
        target = self.point(inside, source.is_dir())
        self.mount(target, "--bind", str(source))
        if readonly:
            _sh("mount", "-o", "remount,bind,ro", str(target))

    def undo(self) -> None:
        for target in reversed(self.mounted):
            if subprocess.run(["umount", str(target)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], check=False)
        self.mounted.clear()
        for path in reversed(self.created):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
        self.created.clear()


@contextlib.contextmanager
def overlay(lower: Sequence[Path], upper: Path | None, scratch: Path) -> Iterator[Path]:
    """Mount lower (bottom first) + upper at a fresh folder under scratch; without an
    upper the mount is read-only (a look at an image's root filesystem)."""
    work, merged = scratch / "work", scratch / "merged"
    for folder in (work, merged) if upper is None else (upper, work, merged):
        folder.mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={':'.join(str(p) for p in reversed(lower))}"
    if upper is not None:
        # metacopy off: a copy-up must carry the data, or the upper is not a full layer
        options += f",upperdir={upper},workdir={work},redirect_dir=off,metacopy=off,index=off"
    _sh("mount", "-t", "overlay", "overlay", "-o", options, str(merged))
    try:
        yield merged
    finally:
        if subprocess.run(["umount", str(merged)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(merged)], check=False)
        for folder in (work, merged):
            subprocess.run(["rm", "-rf", str(folder)], check=False)


def host_pip_env() -> dict[str, str]:
    """The host's pip configuration as PIP_* variables (its files, then its env)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    )
    env: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, eq, value = line.partition("=")
        if not eq or key.startswith(":env:"):
            continue
        option = key.partition(".")[2]
        env["PIP_" + option.upper().replace("-", "_")] = str(ast.literal_eval(value))
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    return env


def local_paths(env: dict[str, str]) -> list[Path]:
    """Host files and folders a pip configuration points at (certs, constraints, wheel
    folders, file:// indexes with the folder around them: their pages link beside them)."""
    paths: set[Path] = set()
    for value in env.values():
        for word in value.split():
            path = Path(word.removeprefix("file://"))
            if word.startswith("file://"):
                path = path.parent
            if path.is_absolute() and path.exists() and path != Path("/"):
                paths.add(path)
    return sorted(p for p in paths if not any(a in paths for a in p.parents))


@contextlib.contextmanager
def runnable(root: Path, pip_env: dict[str, str]) -> Iterator[None]:
    """Make root fit for chroot commands: /proc, a minimal /dev, DNS, the pip config."""
    mounts = Mounts(root)
    try:
        mounts.mount(mounts.point("/proc", True), "-t", "proc", "proc")
        dev = mounts.point("/dev", True)
        mounts.mount(dev, "-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs")
        for name in DEVICES:
            (dev / name).touch()
            mounts.mount(dev / name, "--bind", f"/dev/{name}")
        (dev / "shm").mkdir()
        os.chmod(dev / "shm", 0o1777)  # mkdir's mode goes through the umask
        for i, name in enumerate(("stdin", "stdout", "stderr")):
            (dev / name).symlink_to(f"/proc/self/fd/{i}")
        (dev / "fd").symlink_to("/proc/self/fd")
        mounts.bind(Path("/etc/resolv.conf").resolve(), "/etc/resolv.conf")
        for path in local_paths(pip_env):
            mounts.bind(path, str(path))
        yield
    finally:
        mounts.undo()


def parse_user(user: str) -> tuple[int, int]:
    """USER as numbers (`root`, `uid` or `uid:gid`; names other than root are not
    looked up, so the image's passwd file does not matter)."""
    name, _, group = (user or "0").partition(":")
    try:
        uid = 0 if name == "root" else int(name)
        gid = int(group) if group else (0 if uid == 0 else uid)
    except ValueError:
        raise ImageBuildError(
            f"USER {user}: use numeric ids (e.g. 2000 or 65532:65532) or root"
        ) from None
    return uid, gid


def entering(root: Path, user: str, workdir: str) -> Callable[[], None]:
    """A preexec_fn that chroots into root, as user, in workdir."""
    uid, gid = parse_user(user)

    def enter() -> None:
        os.chroot(root)
        os.chdir(workdir or "/")
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return enter


RUN_TAIL = 30  # lines of a RUN's output a failure shows (a success: its last line)


def run(root: Path, argv: Sequence[str], env: dict[str, str], user: str, workdir: str) -> None:
    """Run argv chrooted into root as user; raise on failure with the end of its output.
    A success says only its last line (pip's hundred lines are no news in a demo)."""
    enter = entering(root, user, workdir)
    print(f"   RUN {' '.join(argv)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(
        list(argv),
        env=env,
        preexec_fn=enter,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail[1 - RUN_TAIL :], line.rstrip()]
    if tail and proc.wait() == 0:
        print(f"   | {tail[-1]}", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise ImageBuildError(
            f"RUN {' '.join(argv)} exited with {proc.returncode}; last output:\n    "
            + "\n    ".join(tail)
        )
