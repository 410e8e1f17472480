"""The Debian root filesystem the images start from (`debootstrap --variant=minbase`).

The suite is the host's own (the Python the images reuse was built against its
libraries) and the mirror is the host's apt source, read at run time. The packages that
own the shared libraries of that Python are found with ldd + dpkg, so the image has
exactly what the interpreter links against.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from spyre_devcluster.images.store import ImageBuildError, remove_tree

APT_SOURCES = (Path("/etc/apt/sources.list.d"), Path("/etc/apt/sources.list"))
OS_RELEASE = Path("/etc/os-release")
ALWAYS = ("ca-certificates",)


def host_suite() -> str:
    for line in OS_RELEASE.read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise ImageBuildError(f"{OS_RELEASE} has no VERSION_CODENAME: is this Debian?")


def _deb822_mirrors(text: str, suite: str) -> list[str]:
    found: list[str] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith((" ", "#")):
                fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and suite in fields.get("suites", []):
            found.extend(fields.get("uris", []))
    return found


def _one_line_mirrors(text: str, suite: str) -> list[str]:
    found = []
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
            found.append(words[1])
    return found


def host_mirror(suite: str) -> str:
    """The first `deb` source of the host for suite (deb822 or one-line format)."""
    folder, single = APT_SOURCES
    files = sorted(folder.glob("*.sources")) + sorted(folder.glob("*.list"))
    if single.exists():
        files.append(single)
    for path in files:
        text = path.read_text()
        mirrors = (
            _deb822_mirrors(text, suite)
            if path.suffix == ".sources"
            else _one_line_mirrors(text, suite)
        )
        if mirrors:
            return mirrors[0]
    raise ImageBuildError(
        f"no `deb` source for {suite} in {folder} or {single}: add your Debian mirror to "
        "the apt sources (debootstrap uses the same one)"
    )


def library_packages(python_prefix: Path) -> list[str]:
    """Debian packages owning the shared libraries the Python and its modules load."""
    version = re.sub(r"^(\d+\.\d+).*", r"\1", python_prefix.name)
    elves = [python_prefix / "bin" / f"python{version}"]
    elves += sorted((python_prefix / "lib").glob("libpython*.so*"))
    # all extension modules but Tk's (X11 and fonts have no use in a server image; like
    # the python:slim images, `import tkinter` fails there)
    dynload = python_prefix / "lib" / f"python{version}" / "lib-dynload"
    elves += sorted(p for p in dynload.glob("*.so") if not p.name.startswith("_tkinter"))
    libraries: set[str] = set()
    for elf in elves:
        out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            match = re.search(r"=> (/\S+)", line)
            if match and not match.group(1).startswith(str(python_prefix)):
                libraries.add(match.group(1))
    if not libraries:
        raise ImageBuildError(f"ldd found no libraries for the Python in {python_prefix}")
    # with merged /usr, ldd says /lib/... where dpkg may know /usr/lib/... (or the reverse)
    candidates = set()
    for library in libraries:
        real = str(Path(library).resolve())
        candidates |= {library, real, real.removeprefix("/usr"), "/usr" + library}
    owners = subprocess.run(
        ["dpkg", "-S", *sorted(candidates)], capture_output=True, text=True, check=False
    )
    found: dict[str, str] = {}
    for line in owners.stdout.splitlines():
        package, _, path = line.partition(": ")
        found[path] = package.split(":")[0]
    missing = [
        lib
        for lib in sorted(libraries)
        if not any(c in found for c in (lib, "/usr" + lib, str(Path(lib).resolve())))
    ]
    if missing:
        raise ImageBuildError(f"no Debian package owns {', '.join(missing)} (dpkg -S)")
    return sorted(set(found.values()) | set(ALWAYS))


def ensure_debootstrap() -> None:
    """Install debootstrap if missing. Before the base's key is computed: the key holds
    its version, and a key taken before the install would change after the first build
    (found in a cold run: the next call rebuilt the base and pruned the one in use)."""
    if shutil.which("debootstrap") is None:
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        checked(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"])


def debootstrap(target: Path, suite: str, packages: list[str], mirror: str) -> None:
    """Make a minbase root filesystem in target, cleaned for use as a layer."""
    ensure_debootstrap()
    remove_tree(target)
    checked(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            suite,
            str(target),
            mirror,
        ]
    )
    # no package caches, no device nodes (the runtime mounts /dev), and an empty
    # resolv.conf as the mount point the runtime fills
    for folder in ("var/cache/apt/archives", "var/lib/apt/lists", "dev"):
        for path in (target / folder).iterdir():
            if path.is_dir() and not path.is_symlink():
                if path.name != "partial":
                    remove_tree(path)
            else:
                path.unlink()
    (target / "etc" / "resolv.conf").unlink(missing_ok=True)
    (target / "etc" / "resolv.conf").touch()
    os.chmod(target / "etc" / "resolv.conf", 0o644)


def checked(cmd: list[str], label: str = "", env: dict[str, str] | None = None) -> None:
    """Run cmd (shown as label, default the command), raising with its output's tail."""
    print(f"   $ {label or ' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", **(env or {})},
    )
    if proc.returncode != 0:
        tail = "\n    ".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        shown = label or " ".join(cmd[:3]) + " ..."
        raise ImageBuildError(f"`{shown}` failed:\n    {tail}")
