"""The architectures the operator image is built for, and what each takes from where.

Every one is Debian's Python plus wheels from PyPI for that CPU. Where PyPI has no wheel
of a dependency for an architecture, the table says what stands in (checked 2026-11-26):

    ppc64le  PyYAML has no ppc64le wheel: its sdist is built as a pure-Python wheel
             (PYYAML_FORCE_LIBYAML=0): no libyaml, so render/yamlio.py takes the pure
             loader there (the same rules, slower)
    s390x    cryptography has no s390x wheel: Debian's python3-cryptography (38.0.4, the
             project's floor) is used
"""

from __future__ import annotations

from dataclasses import dataclass

from spyre_devcluster.images.store import ImageBuildError


@dataclass(frozen=True)
class Platform:
    name: str  # the OCI architecture: amd64, arm64, ppc64le, s390x
    debian: str  # Debian's name of it
    machine: str  # `uname -m`, the wheel tags' and qemu's name
    suite: str  # the Debian release the image is made of
    python: str  # that release's python3
    glibc: int  # its glibc's minor version: the newest manylinux_2_N it runs
    # PyPI distributions taken from Debian instead (no wheel for this CPU on PyPI)
    from_debian: tuple[tuple[str, str], ...] = ()
    # PyPI distributions built from their sdist as pure Python, with these variables
    pure: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def wheel_platforms(self) -> list[str]:
        """pip's --platform values: every manylinux tag this glibc runs (pip does not
        widen a given manylinux tag to older ones)."""
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(17, self.glibc + 1)]
        return [*tags, f"manylinux2014_{self.machine}"]

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform("amd64", "amd64", "x86_64", "bookworm", "3.11", 36),
        Platform("arm64", "arm64", "aarch64", "bookworm", "3.11", 36),
        Platform(
            "ppc64le",
            "ppc64el",
            "ppc64le",
            "bookworm",
            "3.11",
            36,
            pure=(("pyyaml", (("PYYAML_FORCE_LIBYAML", "0"),)),),
        ),
        Platform(
            "s390x",
            "s390x",
            "s390x",
            "bookworm",
            "3.11",
            36,
            from_debian=(("cryptography", "python3-cryptography"),),
        ),
    )
}


def parse(names: str) -> list[Platform]:
    """`amd64,arm64` (or `linux/arm64`) -> the platforms, in the order given."""
    found = []
    for word in filter(None, (w.strip() for w in names.split(","))):
        name = word.removeprefix("linux/")
        if name not in PLATFORMS:
            raise ImageBuildError(
                f"unknown platform {word!r}: use a comma-separated list of {', '.join(PLATFORMS)}"
            )
        found.append(PLATFORMS[name])
    if not found:
        raise ImageBuildError(f"no platform given: choose from {', '.join(PLATFORMS)}")
    return found
