"""Running another CPU's programs on this one: Debian's qemu-user-static through binfmt_misc.

The handler is registered from the package's own binfmt.d file, whose flags include F:
the kernel opens the emulator when it is registered, so a program chrooted into another
architecture's root filesystem runs with no emulator inside that root. Registering is
what systemd-binfmt does at boot; a machine without it (a container, CI) gets it here.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

from spyre_devcluster.images.store import ImageBuildError

BINFMT = Path("/proc/sys/fs/binfmt_misc")
CONFIGS = Path("/usr/lib/binfmt.d")
PACKAGE = "qemu-user-static"


def native(machine: str) -> bool:
    return machine == platform.machine()


def _install(machine: str) -> None:
    if shutil.which(f"qemu-{machine}-static") is not None:
        return
    subprocess.run(["apt-get", "update", "-qq"], check=False)
    done = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGE],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if done.returncode != 0:
        raise ImageBuildError(f"apt-get install {PACKAGE} failed: {done.stderr.strip()[-500:]}")


def ensure(machine: str) -> None:
    """Make programs of machine (`uname -m` name: aarch64, ppc64le, s390x) run here."""
    if native(machine):
        return
    if os.geteuid() != 0:
        raise ImageBuildError(f"running {machine} programs needs root (binfmt_misc)")
    _install(machine)
    if not (BINFMT / "register").exists():
        done = subprocess.run(
            ["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ImageBuildError(
                f"cannot mount binfmt_misc at {BINFMT}: {done.stderr.strip()} (in a container "
                "the host must mount it, or run the container privileged)"
            )
    handler = BINFMT / f"qemu-{machine}"
    if handler.exists():
        if handler.read_text().splitlines()[0] != "enabled":
            handler.write_text("1")
        return
    config = CONFIGS / f"qemu-{machine}.conf"
    if not config.exists():
        raise ImageBuildError(f"{config} is missing: reinstall {PACKAGE}")
    line = config.read_text().strip()
    try:
        (BINFMT / "register").write_text(line)
    except OSError as exc:
        if not handler.exists():  # another process may have registered it meanwhile
            raise ImageBuildError(f"registering {config} in {BINFMT} failed: {exc}") from exc
