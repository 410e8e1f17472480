"""A Debian root filesystem for any architecture, with nothing of it run.

apt, with a state of its own (the target's `APT::Architecture`, an empty dpkg status, the
host's mirror and keyring), resolves the packages' dependency closure for the target and
downloads it; each .deb's data is unpacked into one tree, with /bin, /sbin and /lib*
folded into /usr (the merged /usr a debootstrap makes). No maintainer script runs: that
would need the target's CPU (debootstrap's second stage under qemu takes minutes). What
the image needs of them is done here: /etc/passwd and /etc/group from base-passwd's
masters, and the CA bundle update-ca-certificates writes (every certificate the package
ships, as a first install enables them all).
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

from spyre_devcluster.images import debian
from spyre_devcluster.images.store import ImageBuildError, remove_tree

KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
MERGED = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # folded into /usr
DROPPED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian")
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"


def _apt(work: Path, arch: str, *args: str) -> None:
    options = {
        "Dir::State": work / "state",
        "Dir::State::status": work / "status",
        "Dir::Cache": work / "cache",
        "Dir::Etc::SourceList": work / "sources.list",
        "Dir::Etc::SourceParts": work / "none",
        "Dir::Etc::Preferences": work / "none" / "preferences",
        "Dir::Etc::PreferencesParts": work / "none",
        "APT::Architecture": arch,
        "APT::Architectures": arch,
        "APT::Install-Recommends": "false",
        "Debug::NoLocking": "true",
        "Acquire::Retries": "3",
    }
    cmd = ["apt-get", "-q", *(f"-o{k}={v}" for k, v in options.items()), *args]
    debian.checked(cmd, f"apt-get ({arch}) {' '.join(args)}")


def download(work: Path, suite: str, arch: str, packages: list[str]) -> list[Path]:
    """The .debs of packages and everything they depend on, for arch, from suite."""
    if not KEYRING.exists():
        raise ImageBuildError(f"{KEYRING} is missing: apt-get install debian-archive-keyring")
    mirror = debian.host_mirror(debian.host_suite())
    for folder in ("state/lists/partial", "cache/archives/partial", "none"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    (work / "status").touch()
    # the suite alone, as debootstrap takes it (the node's Debian images too): its point
    # releases fold the updates in
    (work / "sources.list").write_text(f"deb [signed-by={KEYRING}] {mirror} {suite} main\n")
    _apt(work, arch, "update")
    _apt(work, arch, "install", "-y", "--download-only", *packages)
    debs = sorted((work / "cache" / "archives").glob("*.deb"))
    if not debs:
        raise ImageBuildError(f"apt downloaded nothing for {', '.join(packages)} ({arch})")
    return debs


def _merged(name: str) -> str:
    head, sep, rest = name.removeprefix("./").partition("/")
    return f"usr/{head}{sep}{rest}" if head in MERGED else name.removeprefix("./")


def unpack(deb: Path, root: Path) -> None:
    """The data of one .deb into root, its /bin, /lib... into /usr."""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for member in tar:
            member.name = _merged(member.name)
            if member.islnk():
                member.linkname = _merged(member.linkname)
            if member.name in ("", "."):
                continue
            tar.extract(member, root, numeric_owner=True, filter="fully_trusted")
    if proc.wait() != 0:
        raise ImageBuildError(f"dpkg-deb --fsys-tarfile {deb.name} failed")


def rootfs(target: Path, work: Path, suite: str, arch: str, packages: list[str]) -> None:
    """A root filesystem of packages (and their dependencies) for arch in target."""
    remove_tree(target)
    (target / "usr").mkdir(parents=True)
    for folder in MERGED:
        (target / "usr" / folder).mkdir(exist_ok=True)
        (target / folder).symlink_to(f"usr/{folder}")
    for deb in download(work, suite, arch, packages):
        unpack(deb, target)
    for folder in MERGED:  # keep only the links that lead somewhere
        if not any((target / "usr" / folder).iterdir()):
            (target / folder).unlink()
            (target / "usr" / folder).rmdir()
    for folder in DROPPED:
        remove_tree(target / folder)
    _accounts(target)
    _ca_bundle(target)
    for folder, mode in (("tmp", 0o1777), ("proc", 0o555), ("dev", 0o755), ("root", 0o700)):
        (target / folder).mkdir(exist_ok=True)
        os.chmod(target / folder, mode)
    (target / "etc" / "resolv.conf").write_text("")  # the mount point the runtime fills


def _accounts(root: Path) -> None:
    masters = root / "usr" / "share" / "base-passwd"
    for name in ("passwd", "group"):
        source = masters / f"{name}.master"
        if not source.exists():
            raise ImageBuildError(f"{source} is missing: the package list needs base-passwd")
        (root / "etc" / name).write_text(source.read_text())
        os.chmod(root / "etc" / name, 0o644)


def _ca_bundle(root: Path) -> None:
    shipped = sorted((root / "usr" / "share" / "ca-certificates").rglob("*.crt"))
    if not shipped:
        raise ImageBuildError("no certificates in usr/share/ca-certificates: add ca-certificates")
    bundle = root / CA_BUNDLE
    bundle.parent.mkdir(parents=True, exist_ok=True)
    bundle.write_text("".join(p.read_text().rstrip("\n") + "\n" for p in shipped))
    os.chmod(bundle, 0o644)
