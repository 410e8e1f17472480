"""The injected runtime's start (`python3 -m spyre_runtime`): the image's own setup, the
check that the image can run the command, then the same CLI as `spyre-runtime`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .cli import main as cli_main
from .config import ContractError, from_env, termination_log
from .contract import IMAGE_UNUSABLE
from .imagecheck import image_problem
from .imagesetup import prepare
from .report import failure, log, setup_logging, write_summary

CHECKED = ("precompile", "serve")  # the commands that run vLLM


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    setup_logging()  # before the setup: what it sourced, or could not copy, is in the log
    prepare()
    if args and args[0] in CHECKED:
        environ = dict(os.environ)
        try:
            cfg = from_env(environ, args[1:])
        except ContractError:
            return cli_main(args)  # the CLI says what is wrong with the contract
        problem = image_problem(cfg.flavour, cfg.compile_config)
        if problem is not None:
            log.error("this image cannot %s: %s", args[0], problem)
            write_summary(termination_log(environ), failure(IMAGE_UNUSABLE, problem))
            return 2
    return cli_main(args)
