"""`spyre-operator`: one command line for the operator and its tools.

Each subcommand registers itself from its module here (render.py: `crd`, `render`,
`validate`; run.py: `run`; check_install.py: `check-install`; cache.py: `cache`;
support_bundle.py: `support-bundle`), so this
file stays a table of contents. Other distributions add theirs through the entry point
group `spyre_operator.commands` (the dev cluster's `cluster` and `dev`), so the operator
never imports them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from spyre_operator import __version__
from spyre_operator.cli import cache, check_install, render, run, support_bundle

COMMANDS = "spyre_operator.commands"  # entry points: a `register(subparsers)` each


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    """`plugins`: with the subcommands other installed distributions add (`cluster` and
    `dev` where the dev cluster is installed)."""
    parser = argparse.ArgumentParser(
        prog="spyre-operator",
        description="Serve models on IBM Spyre with vLLM-Spyre: the operator and its tools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render.register(sub)
    run.register(sub)
    check_install.register(sub)
    cache.register(sub)
    support_bundle.register(sub)
    if plugins:
        for found in sorted(entry_points(group=COMMANDS), key=lambda e: e.name):
            found.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The operator's process imports nothing of the dev cluster where it is installed
    # (~10 MB of RSS the image has not: the benchmark runs it from the dev venv).
    args = build_parser(plugins=argv[:1] != ["run"]).parse_args(argv)
    result: int = args.func(args)
    return result
