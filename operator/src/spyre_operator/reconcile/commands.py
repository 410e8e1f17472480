"""Subcommands `run` (the operator) and `dev` (try it on a local control plane)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from spyre_operator.api.runtimes import IMAGE_REPOSITORY
from spyre_operator.reconcile import options
from spyre_operator.render.pod import PLATFORMS


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run the operator (kopf) against the current kubeconfig or in-cluster config",
        description="Reconcile SpyreModels: compile Job -> serving Deployment + Service.",
    )
    run.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG)")
    run.add_argument(
        "--liveness",
        metavar="URL",
        help="serve kopf's liveness endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    run.add_argument(
        "--metrics-port", type=int, default=0, help="serve Prometheus metrics on this port"
    )
    run.add_argument(
        "--resync-seconds",
        type=float,
        default=options.DEFAULT_RESYNC,
        help="reconcile every SpyreModel and SpyreCache once in this period, spread evenly "
        "over it (default: %(default)s)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=options.DEFAULT_WORKERS,
        help="threads for reconciles (default: %(default)s)",
    )
    run.add_argument(
        "--max-compiles",
        type=_count,
        default=options.DEFAULT_MAX_COMPILES,
        metavar="N",
        help="compile Jobs running at once in the watched namespaces; the rest wait in "
        "status (CacheReady reason Queued), oldest SpyreModel first; 0: unlimited "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--max-compiles-per-namespace",
        type=_count,
        default=options.DEFAULT_MAX_COMPILES_NAMESPACE,
        metavar="N",
        help="compile Jobs running at once in one namespace; 0: unlimited (default: %(default)s)",
    )
    run.add_argument(
        "--progress-seconds",
        type=_seconds,
        default=options.DEFAULT_PROGRESS,
        metavar="SECONDS",
        help="how often a running compile's progress (status.cache.progress) is read from "
        "the end of its pod's log (needs get on pods/log); 0: never (default: %(default)s)",
    )
    run.add_argument(
        "--cache-retention",
        type=_duration,
        default=options.DEFAULT_CACHE_RETENTION,
        metavar="DURATION",
        help="remove a cache key from its volume this long after the last SpyreModel using "
        "it went (a clean-up Job; never a key in use, compiling or asked for by a SpyreCache "
        "of yours), e.g. 7d, 12h, 30m; 0: never (default: %(default)s)",
    )
    run.add_argument(
        "--platform",
        choices=PLATFORMS,
        default=PLATFORMS[0],
        help="where the compile and serving pods run: openshift leaves their fsGroup to the "
        "restricted-v2 SCC (default: %(default)s)",
    )
    run.add_argument(
        "--verbose", "-v", action="store_true", help="debug logging, with kopf's line per event"
    )
    _runtime_image_flags(run)
    _webhook_flags(run)
    run.set_defaults(func=_run)

    dev = sub.add_parser(
        "dev",
        help="local control plane + CRD + operator + an example, shown moving through phases",
        description="Bring up (or reuse) a local control plane in --dir, install the CRD, run "
        "the operator, apply an example and print `kubectl get spyremodels` as it changes. "
        "The local control plane has no kubelet: with --simulate this command plays its "
        "part (compile pod terminates, Deployment becomes available).",
    )
    dev.add_argument("--dir", type=Path, help="control plane folder (default: a cache folder)")
    dev.add_argument("--example", type=Path, help="SpyreModel YAML (default: the CPU example)")
    dev.add_argument(
        "--simulate", action="store_true", help="play the kubelet so the model gets Ready"
    )
    dev.add_argument(
        "--node",
        action="store_true",
        help="for real: a local node, the operator installed by the chart, a tiny model "
        "compiled and served, a completion through the Service (root; else --simulate)",
    )
    dev.add_argument(
        "--keep", action="store_true", help="leave the control plane running at the end"
    )
    dev.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step")
    dev.set_defaults(func=_dev)


def _duration(text: str) -> str:
    try:
        options.duration_seconds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: use 0 (unlimited) or a positive number")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g}: use 0 (off) or a positive number")
    return value


def _runtime_image_flags(run: argparse.ArgumentParser) -> None:
    group = run.add_argument_group(
        "serving image", "Where the compile, weights and serving pods pull the runtime from."
    )
    group.add_argument(
        "--runtime-image-repository",
        default=IMAGE_REPOSITORY,
        metavar="REPOSITORY",
        help="the serving images' repository, e.g. a mirror or an air-gapped copy: a "
        "SpyreModel without spec.image runs REPOSITORY:<operator version>-<flavour>-<version>; "
        "moving it keeps every cache key (default: %(default)s)",
    )
    group.add_argument(
        "--runtime-image-pull-secret",
        action="append",
        default=[],
        metavar="NAME",
        help="a docker-registry Secret every workload pod pulls with, before the "
        "SpyreModel's own imagePullSecrets; create it in each namespace with SpyreModels "
        "(the kubelet pulls without a missing one) (repeatable)",
    )


def _webhook_flags(run: argparse.ArgumentParser) -> None:
    hook = run.add_argument_group(
        "admission webhook",
        "Refuse invalid SpyreModels at `kubectl apply` with the messages of "
        '`spyre-operator validate` (docs/install.md, "Admission").',
    )
    hook.add_argument(
        "--webhook-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve it over HTTPS on this port (default: off)",
    )
    hook.add_argument(
        "--webhook-secret",
        metavar="NAMESPACE/NAME",
        help="keep a self-signed CA and serving certificate in this Secret (issued when "
        "missing, renewed at 2/3 of their year)",
    )
    hook.add_argument(
        "--webhook-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name the API server reaches the operator by, for the certificate: "
        "SERVICE.NAMESPACE.svc in a cluster, or an IP address (repeatable)",
    )
    hook.add_argument(
        "--webhook-configuration",
        metavar="NAME",
        help="the ValidatingWebhookConfiguration whose caBundle the operator keeps current",
    )
    hook.add_argument(
        "--webhook-cert-dir",
        metavar="DIR",
        help="instead of --webhook-secret: serve DIR/tls.crt and DIR/tls.key, which "
        "someone else keeps (e.g. cert-manager, whose cainjector sets the caBundle)",
    )
    hook.add_argument(
        "--webhook-check-seconds",
        type=float,
        default=options.DEFAULT_WEBHOOK_CHECK,
        metavar="SECONDS",
        help="how often the certificate (and the caBundle) is checked (default: %(default)s)",
    )


def _run(args: argparse.Namespace) -> int:
    os.environ[options.RESYNC_ENV] = str(args.resync_seconds)
    os.environ[options.METRICS_ENV] = str(args.metrics_port)
    os.environ[options.NAMESPACES_ENV] = ",".join(args.namespace)
    os.environ[options.WORKERS_ENV] = str(args.workers)
    os.environ[options.PLATFORM_ENV] = args.platform
    os.environ[options.MAX_COMPILES_ENV] = str(args.max_compiles)
    os.environ[options.MAX_COMPILES_NAMESPACE_ENV] = str(args.max_compiles_per_namespace)
    os.environ[options.PROGRESS_ENV] = str(args.progress_seconds)
    os.environ[options.CACHE_RETENTION_ENV] = args.cache_retention
    os.environ[options.WEBHOOK_PORT_ENV] = str(args.webhook_port)
    os.environ[options.WEBHOOK_SECRET_ENV] = args.webhook_secret or ""
    os.environ[options.WEBHOOK_HOSTS_ENV] = ",".join(args.webhook_host)
    os.environ[options.WEBHOOK_CONFIGURATION_ENV] = args.webhook_configuration or ""
    os.environ[options.WEBHOOK_CERT_DIR_ENV] = args.webhook_cert_dir or ""
    os.environ[options.WEBHOOK_CHECK_ENV] = str(args.webhook_check_seconds)
    os.environ[options.RUNTIME_IMAGE_REPOSITORY_ENV] = args.runtime_image_repository
    os.environ[options.RUNTIME_IMAGE_PULL_SECRETS_ENV] = ",".join(args.runtime_image_pull_secret)
    try:  # a wrong value or combination fails here, with what to pass, not in kopf
        options.runtime_images()
        options.webhook()
    except ValueError as err:
        print(f"spyre-operator run: {err}", file=sys.stderr)
        return 2
    if args.kubeconfig:  # before kopf and the client are imported: they read it then
        os.environ["KUBECONFIG"] = args.kubeconfig
    from spyre_operator.reconcile.kube import cannot_start

    problem = cannot_start(os.environ.get("KUBECONFIG"))
    if problem:  # one line and out (in a cluster: the pod restarts, with back-off)
        print(f"spyre-operator run: {problem}", file=sys.stderr)
        return 1
    from spyre_operator.reconcile.allocator import limit_arenas

    limit_arenas()  # before any thread starts
    import kopf
    from kopf._core.engines.peering import Identity  # the type kopf.run's identity wants

    kopf.configure(verbose=args.verbose, log_prefix=True)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    if not args.verbose:  # kopf's "Handler ... succeeded" for every watch event of every
        # child; the reconciler logs what it writes and every transition instead.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    from spyre_operator import handlers  # registers the handlers (reads the env above)

    del handlers
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
        standalone=True,
        # kopf's default identity looks the uid up in /etc/passwd, which has no entry for
        # the image's non-root uid 65532 (KeyError at start-up); the pod name is unique
        identity=Identity(f"spyre-operator@{socket.gethostname()}"),
    )
    return 0


def _dev(args: argparse.Namespace) -> int:
    from spyre_operator.local.dev import main

    return main(args)
