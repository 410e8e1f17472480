"""`spyre-operator cluster images build|import`: the node's images, without a registry."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from spyre_devcluster.images import recipes
from spyre_devcluster.images.containerd import NAMESPACE, import_image
from spyre_devcluster.images.containerfile import ContainerfileError
from spyre_devcluster.images.oci import LayerChanged
from spyre_devcluster.images.store import Image, ImageBuildError, images_root

DEFAULT = ["pause", "operator", "runtime-cpu"]


def register(actions: Any) -> None:
    images = actions.add_parser(
        "images",
        help="build the node's images locally and import them into a containerd",
        description="Build the pause, operator and CPU serving images from Debian and PyPI "
        "packages and the real Containerfiles (no registry), cached by their inputs under "
        f"$SPYRE_SERVING_CACHE/images. Images: {', '.join(recipes.BUILDERS)} (default: "
        f"{' '.join(DEFAULT)}). Needs root. See docs/images.md.",
    )
    verbs = images.add_subparsers(dest="verb", required=True, metavar="VERB")
    build = verbs.add_parser("build", help="build (or find cached) images, print their names")
    build.add_argument("names", nargs="*", default=DEFAULT, metavar="IMAGE")
    build.set_defaults(func=_build)
    imp = verbs.add_parser(
        "import",
        help="build if needed, then import into the containerd at --address",
        description="Stream the images into `ctr images import` (namespace k8s.io, "
        "overlayfs), skipping layers containerd has unpacked already, then drop big layer "
        "blobs from its content store (containers run from the snapshots).",
    )
    imp.add_argument("names", nargs="*", default=DEFAULT, metavar="IMAGE")
    imp.add_argument("--address", required=True, help="containerd socket path")
    imp.add_argument("--namespace", default=NAMESPACE)
    imp.set_defaults(func=_import)


def _build_named(names: list[str]) -> list[Image]:
    started = time.monotonic()
    images = recipes.build_images(names)
    for image in images:
        print(f"{image.name}  {image.manifest.digest[:19]}  {image.size / 1e6:.0f} MB")
    print(f"built or found in {time.monotonic() - started:.1f}s ({images_root()})")
    return images


def _build(args: argparse.Namespace) -> int:
    try:
        _build_named(args.names)
    except (ImageBuildError, ContainerfileError, LayerChanged) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _import(args: argparse.Namespace) -> int:
    try:
        for image in _build_named(args.names):
            done = import_image(image, args.address, args.namespace)
            state = "already there" if done.already else f"{done.streamed / 1e6:.0f} MB streamed"
            print(
                f"imported {done.name}: {state}, {done.skipped} layers reused, {done.seconds:.1f}s"
            )
    except (ImageBuildError, ContainerfileError, LayerChanged) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
