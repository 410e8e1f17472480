"""Subcommand `cache ls|push|pull`: compiled caches in an OCI registry, by hand.

To seed an air-gapped registry from a volume that compiled, to fill a volume from a
registry, or to see what a repository holds. The artifact and its checks are the serving
image's own (spyre_runtime.cacheshare), so what this pushes the pull Job accepts, and what
it refuses this refuses too. Failures go to stderr as one line; exit 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spyre_runtime.cacheartifact import (
    ANNOTATION_BYTES,
    ANNOTATION_FLAVOUR,
    ANNOTATION_MODEL,
    ANNOTATION_MODEL_COMMIT,
    ANNOTATION_RUNTIME_VERSION,
    KEY,
    Limits,
    Refused,
    architecture,
)
from spyre_runtime.cacheshare import Moved, fetch, listing, publish
from spyre_runtime.contract import READY_NAME
from spyre_runtime.ociregistry import Client, RegistryError, Repository, read_credentials

FAILED = 1


def _key(text: str) -> str:
    if not KEY.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a cache key (64 lowercase hex digits)")
    return text


def register(sub: Any) -> None:
    """Add `cache` and its verbs to the `spyre-operator` parser."""
    cache = sub.add_parser(
        "cache",
        help="list, push and pull compiled caches in an OCI registry",
        description="Compiled caches as OCI artifacts, tagged <key>-<architecture> in a "
        "repository (docs/cache-sharing.md).",
    )
    verbs = cache.add_subparsers(dest="verb", required=True, metavar="VERB")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "repository",
        type=_repository,
        help="host[:port]/path, e.g. registry.example.com/spyre/caches",
    )
    common.add_argument(
        "--auth-file",
        type=Path,
        default=Path.home() / ".docker" / "config.json",
        help="a Docker config with the registry's credentials, e.g. podman's "
        "$REGISTRY_AUTH_FILE (default: ~/.docker/config.json; none there: anonymous)",
    )
    common.add_argument("--ca-file", help="PEM CA of a registry with a private certificate")

    ls = verbs.add_parser("ls", parents=[common], help="the caches the repository holds")
    ls.set_defaults(func=_ls)

    moving = argparse.ArgumentParser(add_help=False, parents=[common])
    moving.add_argument("root", type=Path, help="the cache volume's root (holds <key>/ folders)")
    moving.add_argument(
        "--arch",
        default=None,
        help="the architecture the graphs were compiled on (default: this machine's)",
    )
    push = verbs.add_parser(
        "push", parents=[moving], help="push ready keys of a volume (default: every one)"
    )
    push.add_argument("keys", nargs="*", type=_key, metavar="KEY")
    push.set_defaults(func=_push)
    pull = verbs.add_parser("pull", parents=[moving], help="pull keys into a volume")
    pull.add_argument("keys", nargs="+", type=_key, metavar="KEY")
    pull.add_argument(
        "--max-bytes",
        type=int,
        default=Limits().tree_bytes,
        help="refuse an artifact whose layer is bigger (default: %(default)s)",
    )
    pull.set_defaults(func=_pull)


def _repository(text: str) -> Repository:
    try:
        return Repository.parse(text)
    except RegistryError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _client(args: argparse.Namespace) -> Client:
    auth = read_credentials(args.auth_file, args.repository.host)
    return Client(args.repository, auth, args.ca_file)


def _fail(message: str) -> int:
    print(f"spyre-operator cache: {message}", file=sys.stderr)
    return FAILED


def _ls(args: argparse.Namespace) -> int:
    try:
        found = listing(_client(args))
    except (RegistryError, Refused) as e:
        return _fail(str(e))
    rows = [("TAG", "FLAVOUR", "RUNTIME", "MODEL", "COMMIT", "BYTES")]
    for item in found:
        a = item.annotations
        if item.problem:
            rows.append((item.tag, "-", "-", f"(refused: {item.problem})", "-", "-"))
            continue
        rows.append(
            (
                item.tag,
                a[ANNOTATION_FLAVOUR],
                a[ANNOTATION_RUNTIME_VERSION],
                a[ANNOTATION_MODEL],
                a[ANNOTATION_MODEL_COMMIT][:12] or "-",
                a[ANNOTATION_BYTES],
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _said(verb: str, moved: Moved) -> str:
    if moved.already:
        return f"{verb} {moved.reference}: already there, nothing moved"
    return (
        f"{verb} {moved.reference} ({moved.digest}): {moved.bytes} bytes, {moved.files} files "
        f"in {moved.seconds:.1f} s"
    )


def _push(args: argparse.Namespace) -> int:
    keys = args.keys or sorted(
        p.parent.name for p in args.root.glob(f"*/{READY_NAME}") if KEY.match(p.parent.name)
    )
    if not keys:
        return _fail(f"{args.root} holds no ready key (<key>/{READY_NAME}) to push")
    client = _client(args)
    failed = 0
    for key in keys:
        try:
            print(_said("pushed", publish(client, args.root, key, args.arch or architecture())))
        except (RegistryError, Refused) as e:
            failed += _fail(f"{key}: {e}")
    return FAILED if failed else 0


def _pull(args: argparse.Namespace) -> int:
    client = _client(args)
    limits = Limits(tree_bytes=args.max_bytes)
    failed = 0
    for key in args.keys:
        try:
            moved = fetch(client, args.root, key, args.arch or architecture(), limits)
        except (RegistryError, Refused) as e:
            failed += _fail(f"{key}: refused: {e}")
            continue
        if moved is None:
            failed += _fail(f"{key}: {args.repository} has no cache of it for this architecture")
        else:
            print(_said("pulled", moved))
    return FAILED if failed else 0
