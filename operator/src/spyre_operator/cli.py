"""`spyre-operator`: one command line for the operator and its tools.

Each area registers its own subcommands, so this file stays a table of contents.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spyre_operator import __version__, cache_commands
from spyre_operator.controller import check_install, run
from spyre_operator.render import commands as render_commands


def build_parser(devcluster: bool = True) -> argparse.ArgumentParser:
    """`devcluster`: with `cluster` and `dev` where the dev cluster is installed."""
    parser = argparse.ArgumentParser(
        prog="spyre-operator",
        description="Serve models on IBM Spyre with vLLM-Spyre: the operator and its tools.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    render_commands.register(sub)
    run.register(sub)
    check_install.register(sub)
    cache_commands.register(sub)
    if not devcluster:
        return parser
    try:  # `cluster` and `dev`: the dev cluster's distribution, which the image lacks
        from spyre_devcluster import commands as devcluster_commands
    except ImportError:
        pass
    else:
        devcluster_commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The operator's process imports nothing of the dev cluster where it is installed
    # (~10 MB of RSS the image has not: the benchmark runs it from the dev venv).
    args = build_parser(devcluster=argv[:1] != ["run"]).parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
