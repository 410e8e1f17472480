"""Subcommand `run`: the operator, with a flag per setting (settings.py)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Mapping
from typing import Any

from spyre_operator import settings
from spyre_operator.api.runtimes import PLATFORMS


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run the operator (kopf) against the current kubeconfig or in-cluster config",
        description="Reconcile SpyreModels: compile Job -> serving Deployment + Service.",
    )
    run.add_argument(
        "--liveness",
        metavar="URL",
        help="serve kopf's liveness endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    run.add_argument(
        "--verbose", "-v", action="store_true", help="debug logging, with kopf's line per event"
    )
    add_flags(run)
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:  # a wrong value or combination fails here, with what to pass, not in kopf
        config = from_flags(args)
    except settings.SettingsError as err:
        print(f"spyre-operator run: {err}", file=sys.stderr)
        return 2
    if config.kubeconfig:  # before kopf and the client are imported: they read it then
        os.environ["KUBECONFIG"] = config.kubeconfig
    from spyre_operator.kube.client import cannot_start

    problem = cannot_start(config.kubeconfig)
    if problem:  # one line and out (in a cluster: the pod restarts, with back-off)
        print(f"spyre-operator run: {problem}", file=sys.stderr)
        return 1
    from spyre_operator.controller.allocator import limit_arenas

    limit_arenas(told=config.malloc_arena_max)  # before any thread starts
    import kopf
    from kopf._core.engines.peering import Identity  # the type kopf.run's identity wants

    kopf.configure(verbose=args.verbose, log_prefix=True)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    if not args.verbose:  # kopf's "Handler ... succeeded" for every watch event of every
        # child; the reconciler logs what it writes and every transition instead.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings.install(config)
    from spyre_operator import handlers  # registers the handlers (reads the settings)

    del handlers
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        liveness_endpoint=args.liveness,
        standalone=True,
        # kopf's default identity looks the uid up in /etc/passwd, which has no entry for
        # the image's non-root uid 65532 (KeyError at start-up); the pod name is unique
        identity=Identity(f"spyre-operator@{socket.gethostname()}"),
    )
    return 0


def add_flags(parser: argparse.ArgumentParser | Any) -> None:
    """One flag per setting; a flag not given falls back to the environment, then the
    default (argparse.SUPPRESS: absent flags are absent from the parsed namespace)."""
    for field, info in settings.Settings.model_fields.items():
        extra = settings.extra_of(field)
        if extra.get("flag") is False:
            continue
        names = [settings.flag_name(field)] + ([extra["short"]] if "short" in extra else [])
        options: dict[str, Any] = {
            "dest": field,
            "default": argparse.SUPPRESS,
            "metavar": extra.get("metavar"),
            "help": _help(field, info.description or "", info.default),
        }
        if info.annotation == settings.Names:
            options["action"] = "append"
        elif field == "platform":
            options["choices"] = PLATFORMS
            options.pop("metavar")
        parser.add_argument(*names, **options)


def _help(field: str, text: str, default: Any) -> str:
    after = f"${settings.env_name(field)}"
    if default not in (None, ()):
        after += (
            f"; default: {default:g}" if isinstance(default, float) else f"; default: {default}"
        )
    return f"{text} ({after})".replace("%", "%%")


def from_flags(
    parsed: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> settings.Settings:
    """`run`'s settings: its flags, then `environ` (None: this process's environment)."""
    given = {f: getattr(parsed, f) for f in settings.Settings.model_fields if hasattr(parsed, f)}
    return settings.from_env(environ, **given)
