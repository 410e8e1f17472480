"""`spyre-runtime <precompile|serve|describe> [vllm args...]`, `spyre-runtime weights
[--from DIR]`, `spyre-runtime clean`, `spyre-runtime pull`, `spyre-runtime tiny-models DIR`.

Everything after the subcommand is passed to vLLM untouched, so no argparse here: it would
try to interpret vLLM's own flags.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .catalog import check_cache
from .config import ContractError, RuntimeConfig, from_env
from .contract import (
    MASTER_ADDR,
    MASTER_PORT,
    SPYRE_SERVING_CACHE_KEY,
    SPYRE_SERVING_CACHE_REGISTRY,
    SPYRE_SERVING_CACHE_ROOT,
    SPYRE_SERVING_MODEL_ID,
    SPYRE_SERVING_MODEL_REVISION,
    VLLM_PLUGINS,
    WEIGHTS_DIR,
)
from .report import failure, log, setup_logging, termination_log, write_summary

USAGE = f"""usage: spyre-runtime <command> [vllm serve args...]
       spyre-runtime weights [--from <dir>]
       spyre-runtime clean
       spyre-runtime pull
       spyre-runtime tiny-models <dir>

commands:
  precompile  warm up vLLM-Spyre into <{SPYRE_SERVING_CACHE_ROOT}>/<{SPYRE_SERVING_CACHE_KEY}>/,
              then write the catalog entry and the READY marker (the compile Job)
  serve       check that cache, then exec `vllm serve <args>` (the serving pods)
  describe    print what serve would run, the env it relies on and the cache state
  weights     put {SPYRE_SERVING_MODEL_ID} at {SPYRE_SERVING_MODEL_REVISION} (resolved to its
              commit) into <{SPYRE_SERVING_CACHE_ROOT}>/{WEIGHTS_DIR}/<id>/<commit>/, from the hub
              (HF_ENDPOINT, HF_TOKEN) or, with --from, from a local copy (the weights Job)
  clean       remove <{SPYRE_SERVING_CACHE_ROOT}>/<{SPYRE_SERVING_CACHE_KEY}>/ and nothing
              else, once it is a key's directory (not a symlink, directly under the
              root); the summary says the bytes freed (the clean-up Job)
  pull        fetch <{SPYRE_SERVING_CACHE_ROOT}>/<{SPYRE_SERVING_CACHE_KEY}>/ from the registry
              {SPYRE_SERVING_CACHE_REGISTRY} instead of compiling it: every layer's digest,
              the key and the architecture checked, READY written last (the pull Job);
              with the registry set, precompile publishes the key there after READY
  tiny-models write <dir>/granite and <dir>/roberta: tiny random-weight models made here,
              nothing downloaded (to try the stack without hub access)

The env/args contract is docs/contract.md."""

# Non-plugin variables that the plugin or torch_sendnn read (docs/contract.md).
_RELIED_ON = (
    VLLM_PLUGINS,
    "TORCH_SENDNN_",
    "TORCHINDUCTOR_",
    MASTER_ADDR,
    MASTER_PORT,
    "SPYRE_SERVING_",
)


def describe(cfg: RuntimeConfig, environ: dict[str, str]) -> int:
    from .serve import vllm_command

    env = cfg.vllm_env(environ)
    relied_on = sorted(
        name for name in env if name.startswith((*_RELIED_ON, cfg.flavour.env_prefix))
    )
    state = check_cache(cfg)
    lines = [
        f"flavour: {cfg.flavour.name} (VLLM_PLUGINS={cfg.flavour.plugin}, "
        f"settings {cfg.flavour.env_prefix}*)",
        f"cache: {'READY' if state.ready else 'NOT READY'}: {state.summary}",
        f"require precompiled: {cfg.require_precompiled} ({cfg.flavour.require_precompiled_var})",
        "env:",
        *(f"  {name}={env[name]}" for name in relied_on),
        "command: " + " ".join(vllm_command(cfg)),
    ]
    print("\n".join(lines))
    return 0


def tiny_models(args: list[str]) -> int:
    if len(args) != 1:
        print(f"tiny-models takes one argument, the output folder\n\n{USAGE}", file=sys.stderr)
        return 2
    from .tinymodel import make

    make(Path(args[0]))
    print(args[0])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, vllm_args = args[0], args[1:]
    if command == "tiny-models":
        return tiny_models(vllm_args)
    if command in ("clean", "pull"):
        if vllm_args:
            said = f"{command} takes no arguments (its env names the key)"
            print(f"{said}\n\n{USAGE}", file=sys.stderr)
            return 2
        from .clean import clean
        from .registryjob import pull

        setup_logging()
        return {"clean": clean, "pull": pull}[command](dict(os.environ))
    if command == "weights":
        from .weights import run

        setup_logging()
        return run(vllm_args, dict(os.environ))
    if command not in ("precompile", "serve", "describe"):
        print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    setup_logging()
    environ = dict(os.environ)
    try:
        cfg = from_env(environ, vllm_args)
        if command == "describe":
            return describe(cfg, environ)
        if command == "serve":
            from .serve import serve

            return serve(cfg, environ)
    except ContractError as e:
        log.error("invalid configuration: %s", e)
        if command == "precompile":
            write_summary(termination_log(environ), failure("InvalidConfig", str(e)))
        return 2
    from .precompile import precompile

    return precompile(cfg, environ)


if __name__ == "__main__":
    sys.exit(main())
