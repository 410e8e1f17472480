"""`spyre-operator cluster images build|import`: the node's images, without a registry."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from spyre_devcluster.binaries import ctr_binary
from spyre_devcluster.images import operator_index, platforms, recipes
from spyre_devcluster.images.containerd import NAMESPACE, import_image
from spyre_devcluster.images.containerfile import ContainerfileError
from spyre_devcluster.images.oci import LayerChanged
from spyre_devcluster.images.platforms import PLATFORMS
from spyre_devcluster.images.push import push_index
from spyre_devcluster.images.store import Image, ImageBuildError, images_root
from spyre_devcluster.registry import Registry

PASSWORD_ENV = "SPYRE_REGISTRY_PASSWORD"

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
    index = verbs.add_parser(
        "operator-index",
        help="build the operator image for several architectures; with --push, push the index",
        description="Build (or find cached) the operator image for each platform from Debian "
        "packages of that architecture and PyPI wheels for its CPU (nothing of it runs "
        "but a byte-compile for a Python version the host lacks, under qemu-user-static), "
        "and with --push send them and one OCI "
        "index of them to a registry (TLS, basic auth; the password from "
        f"${PASSWORD_ENV}). Needs root. See docs/images.md.",
    )
    index.add_argument(
        "--platforms",
        default=",".join(PLATFORMS),
        help=f"comma-separated, of {', '.join(PLATFORMS)} (default: all)",
    )
    index.add_argument("--push", metavar="HOST[:PORT]/REPOSITORY:TAG", help="push the index there")
    index.add_argument("--ca", help="the CA certificate (PEM) the registry's TLS is signed by")
    index.add_argument("--username", default="", help="the registry account")
    index.set_defaults(func=_operator_index)


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
    node_ctr = ctr_binary()  # the node's containerd build's client, when it is there
    ctr = node_ctr if node_ctr.exists() else None
    try:
        for image in _build_named(args.names):
            done = import_image(image, args.address, args.namespace, ctr)
            state = "already there" if done.already else f"{done.streamed / 1e6:.0f} MB streamed"
            print(
                f"imported {done.name}: {state}, {done.skipped} layers reused, {done.seconds:.1f}s"
            )
    except (ImageBuildError, ContainerfileError, LayerChanged) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def split_reference(reference: str) -> tuple[str, str, str]:
    """`host[:port]/path/name:tag` -> (host[:port], path/name, tag)."""
    address, slash, rest = reference.partition("/")
    repository, colon, tag = rest.rpartition(":")
    if not slash or not colon or not repository or not tag or "/" in tag:
        raise ImageBuildError(
            f"--push {reference}: expected HOST[:PORT]/REPOSITORY:TAG, "
            "e.g. registry.example.com:5000/spyre-serving/operator:0.1.0"
        )
    return (address if ":" in address else f"{address}:443"), repository, tag


def _operator_index(args: argparse.Namespace) -> int:
    try:
        chosen = platforms.parse(args.platforms)
        target = split_reference(args.push) if args.push else None
        started = time.monotonic()
        images = operator_index.build_index(chosen)
        for image in images:
            print(
                f"linux/{image.architecture}  {image.manifest.digest[:19]}  "
                f"{image.size / 1e6:.0f} MB"
            )
        print(f"built or found in {time.monotonic() - started:.1f}s ({images_root()})")
        if target is not None:
            address, repository, tag = target
            password = os.environ.get(PASSWORD_ENV, "")
            registry = Registry(address, args.ca or "", args.username, password)
            done = push_index(images, registry, repository, tag)
            state = "already there" if done.already else f"{done.sent / 1e6:.0f} MB sent"
            print(f"pushed {done.reference}@{done.digest}: {state}, {done.seconds:.1f}s")
    except (ImageBuildError, ContainerfileError, LayerChanged, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
