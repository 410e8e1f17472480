"""`scripts/release VERSION REGISTRY`: build the images and publish them and the chart.

REGISTRY is `host[:port][/path]`, e.g. `quay.io/spyre-serving`. Published:

    REGISTRY/operator:VERSION                              the operator image: one index of
                                                           amd64, arm64, ppc64le, s390x
    REGISTRY/operator:VERSION-<arch>                       each architecture's image alone
    REGISTRY/runtime-cpu:VERSION-<flavour>-<version>       the CPU serving image (below):
                                                           one index (sendnn-inference:
                                                           amd64, arm64), and <tag>-<arch>
    oci://REGISTRY/charts/spyre-operator:VERSION           the chart (helm package + push)

VERSION is the project's, from one place: `__version__` in spyre_runtime/__init__.py
(pyproject.toml reads it, the image tags and the packaged chart's version/appVersion are
made from it; a unit test keeps charts/spyre-operator/Chart.yaml equal to it). A VERSION
that is not that one is refused: bump it there first. The packaged chart's default image
repositories name REGISTRY, so `helm install oci://REGISTRY/charts/spyre-operator`
pulls from where it was published.

The serving image pushed is the CPU build of image/Containerfile (the real vLLM-Spyre
plugins on CPU, for trying without cards), and the packaged chart's
`runtimeImage.repository` names it (REGISTRY/runtime-cpu), so a CPU model without an image
pulls one that exists. The image builder has no upstream Spyre base, so no `runtime` (card)
image is published and the packaged chart's `runtimeImage.cards` is false: a model on
cards names IBM's or Red Hat's image in `spec.image` with its `runtime.imageProfile` (the
operator brings its runtime to it), or is refused at apply time with what to set; or the
chart's `runtimeImage.repository` names a registry that has images of ours for cards, with
`runtimeImage.cards` true.

Credentials: REGISTRY_USERNAME / REGISTRY_PASSWORD in the environment (basic auth, as
`docker login` sends it), `--ca-file` for a registry whose CA is not the system's.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster.images import operator_index, platforms, recipes, serving_index
from spyre_devcluster.images.containerfile import ContainerfileError
from spyre_devcluster.images.oci import LayerChanged
from spyre_devcluster.images.platforms import Platform
from spyre_devcluster.images.push import push_index
from spyre_devcluster.images.store import Image, ImageBuildError
from spyre_devcluster.registry import Registry
from spyre_devcluster.tools import install_tools, tool
from spyre_operator import __version__
from spyre_operator.api.runtimes import IMAGE_REPOSITORY, RuntimeImages
from spyre_runtime.contract import FLAVOURS

CHART = "spyre-operator"
CHARTS = "charts"  # the chart's repository under REGISTRY
OPERATOR = "operator"
RUNTIME_CPU = "runtime-cpu"
# The registry path the chart's defaults name (values.yaml, Chart.yaml's annotations)
DEFAULT_REGISTRY = IMAGE_REPOSITORY.rpartition("/")[0]
ALL_PLATFORMS = ",".join(platforms.PLATFORMS)  # the architectures Spyre ships in, and arm64
USERNAME_ENV = "REGISTRY_USERNAME"
PASSWORD_ENV = "REGISTRY_PASSWORD"
_REGISTRY = re.compile(r"^(?P<host>[a-z0-9.-]+(:[0-9]+)?)(?P<path>(/[a-z0-9._-]+)*)$")


class ReleaseError(RuntimeError):
    """A release cannot go ahead, with what to do."""


@dataclass(frozen=True)
class Target:
    """Where a release goes: the registry host and the path under it."""

    host: str  # host[:port]
    path: str  # "" or "a/b"

    @classmethod
    def parse(cls, text: str) -> Target:
        found = _REGISTRY.match(text.strip().removesuffix("/"))
        if not found:
            raise ReleaseError(
                f"REGISTRY {text!r} is not host[:port][/path] in lower case, e.g. "
                "quay.io/spyre-serving or 127.0.0.1:5000/spyre-serving (no scheme, no tag)"
            )
        return cls(found["host"], found["path"].lstrip("/"))

    def __str__(self) -> str:
        return f"{self.host}/{self.path}" if self.path else self.host

    def repository(self, name: str) -> str:
        return f"{self}/{name}"

    def chart_url(self) -> str:
        """Where `helm push` puts the chart (and `helm install` finds it, + /spyre-operator)."""
        return f"oci://{self.repository(CHARTS)}"


def check_version(version: str) -> str:
    """VERSION (a tag's `v` prefix dropped) must be the project's."""
    plain = version.removeprefix("v")
    if plain != __version__:
        raise ReleaseError(
            f"VERSION {version} is not the project's version {__version__} "
            "(image/src/spyre_runtime/__init__.py, the one place it is kept): bump it "
            "there and in charts/spyre-operator/Chart.yaml (a unit test keeps them equal), "
            "commit, then tag"
        )
    return plain


def build_serving(flavours: list[str], cpus: list[str] | None) -> list[tuple[str, list[Image]]]:
    """The CPU serving images of each flavour (one per architecture it is built for, of
    cpus), with the tag the operator renders for it."""
    cpu = RuntimeImages(RUNTIME_CPU)
    return [
        (
            cpu.image(f, FLAVOURS[f].default_version).rpartition(":")[2],
            serving_index.build_index(f, cpus),
        )
        for f in flavours
    ]


def packaged_text(text: str, target: Target) -> str:
    """A chart file as packaged: the default images name the target registry, and the
    serving images the CPU repository the release pushes (never a repository nobody
    builds: no release has a card image, so `runtimeImage.cards` is false: a card model
    without spec.image is refused with what to set, IBM's or Red Hat's image)."""
    serving = f"repository: {IMAGE_REPOSITORY}\n"
    text = text.replace(serving, f"repository: {target.repository(RUNTIME_CPU)}\n")
    text = text.replace("\n  cards: true\n", "\n  cards: false\n")
    return text.replace(f"{DEFAULT_REGISTRY}/", f"{target}/")


def package_chart(target: Target, version: str, out: Path) -> Path:
    """`helm package` of a copy of the chart whose default image repositories name the
    target registry, with the version and appVersion `version`."""
    source = recipes.checkout() / "charts" / CHART
    copy = out / "src" / CHART
    shutil.copytree(source, copy)
    for name in ("values.yaml", "Chart.yaml"):
        path = copy / name
        path.write_text(packaged_text(path.read_text(), target))
    _run([tool("helm"), "package", str(copy), "--version", version, "--app-version", version,
          "--destination", str(out)])  # fmt: skip
    return out / f"{CHART}-{version}.tgz"


def push_chart(package: Path, target: Target, registry: Registry) -> None:
    """`helm push` to oci://REGISTRY/charts, logged in with a registry config of its own
    (the password on stdin, never in a command line)."""
    config = package.parent / "registry.json"
    tls = ["--ca-file", registry.ca] if registry.ca else []
    if registry.username:
        _run([tool("helm"), "registry", "login", target.host, "--username", registry.username,
              "--password-stdin", "--registry-config", str(config), *tls],
             stdin=registry.password)  # fmt: skip
    _run([tool("helm"), "push", str(package), target.chart_url(),
          "--registry-config", str(config), *tls])  # fmt: skip


def _run(cmd: list[str], stdin: str | None = None) -> None:
    print(f">> {' '.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, check=False, timeout=600
    )
    if done.returncode != 0:
        raise ReleaseError(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()}")


def release(
    version: str,
    target: Target,
    cpus: list[Platform],
    flavours: list[str],
    ca: str | None,
    serving_cpus: list[str] | None = None,
) -> None:
    """Build, push the images, package and push the chart."""
    version = check_version(version)
    user, password = os.environ.get(USERNAME_ENV, ""), os.environ.get(PASSWORD_ENV, "")
    registry = Registry(target.host, ca, user, password)
    install_tools()
    operator = operator_index.build_index(cpus)
    serving = build_serving(flavours, serving_cpus)
    for name, images, tag in [(OPERATOR, operator, version)] + [
        (RUNTIME_CPU, images, tag) for tag, images in serving
    ]:
        repository = f"{target.path}/{name}" if target.path else name
        done = push_index(images, registry, repository, tag)
        state = "already there" if done.already else f"{done.sent / 1e6:.0f} MB sent"
        cpus_ = ", ".join(i.architecture for i in images)
        print(f"{done.reference}@{done.digest} ({cpus_}): {state} ({done.seconds:.1f}s)")
    with tempfile.TemporaryDirectory(prefix="spyre-release-") as work:
        package = package_chart(target, version, Path(work))
        push_chart(package, target, registry)
    print(f"{target.chart_url()}/{CHART}:{version}: pushed", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/release",
        description="Build the operator and CPU serving images, push them to REGISTRY, "
        "package the chart and push it to oci://REGISTRY/charts. Credentials from "
        f"{USERNAME_ENV}/{PASSWORD_ENV}. Needs root (the image builder).",
    )
    parser.add_argument("version", metavar="VERSION", help=f"{__version__} or v{__version__}")
    parser.add_argument("registry", metavar="REGISTRY", help="e.g. quay.io/spyre-serving")
    parser.add_argument(
        "--platforms",
        default=ALL_PLATFORMS,
        help=f"comma-separated architectures of the operator image (default {ALL_PLATFORMS})",
    )
    parser.add_argument(
        "--flavours",
        default="sendnn-inference",
        help=f"CPU serving images to publish, comma-separated among {', '.join(FLAVOURS)}",
    )
    parser.add_argument(
        "--serving-platforms",
        default="amd64",
        help="comma-separated architectures of the CPU serving images (default amd64; "
        "sendnn-inference also has arm64, a developer's stand-in that adds ~8 GB of wheels "
        "and layers to the build: ask for amd64,arm64)",
    )
    parser.add_argument("--ca-file", help="the registry's CA (PEM), if not the system's")
    args = parser.parse_args(argv)
    flavours = [f for f in args.flavours.split(",") if f]
    started = time.monotonic()
    try:
        unknown = [f for f in flavours if f not in FLAVOURS]
        if unknown:
            raise ReleaseError(f"--flavours {unknown[0]}: not one of {', '.join(FLAVOURS)}")
        target = Target.parse(args.registry)
        cpus = platforms.parse(args.platforms)
        serving_cpus = [p.name for p in platforms.parse(args.serving_platforms)]
        for flavour in flavours:  # a flavour lacking one of them: refused before any build
            serving_index.architectures(flavour, serving_cpus)
        release(args.version, target, cpus, flavours, args.ca_file, serving_cpus)
    except (ReleaseError, ImageBuildError, ContainerfileError, LayerChanged) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"released {__version__} to {target} in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
