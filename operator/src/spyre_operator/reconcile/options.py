"""The operator's settings as environment variables (set by `spyre-operator run` from its
flags, or directly when running `kopf run -m spyre_operator.handlers`). No kopf import:
the CLI reads the defaults without loading the operator."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from spyre_operator.api.runtimes import IMAGE_REPOSITORY, RuntimeImages
from spyre_operator.render.pod import PLATFORMS, Platform
from spyre_runtime.contract import HEARTBEAT_SECONDS

RESYNC_ENV = "SPYRE_OPERATOR_RESYNC_SECONDS"
METRICS_ENV = "SPYRE_OPERATOR_METRICS_PORT"
NAMESPACES_ENV = "SPYRE_OPERATOR_NAMESPACES"
WORKERS_ENV = "SPYRE_OPERATOR_WORKERS"
PLATFORM_ENV = "SPYRE_OPERATOR_PLATFORM"
MAX_COMPILES_ENV = "SPYRE_OPERATOR_MAX_COMPILES"
MAX_COMPILES_NAMESPACE_ENV = "SPYRE_OPERATOR_MAX_COMPILES_PER_NAMESPACE"
PROGRESS_ENV = "SPYRE_OPERATOR_PROGRESS_SECONDS"
CACHE_RETENTION_ENV = "SPYRE_OPERATOR_CACHE_RETENTION"
DEFAULT_RESYNC = 300.0
DEFAULT_WORKERS = 16
# A compile holds CPU and memory (or cards) for 20-60 min: a few at once, the rest queue.
DEFAULT_MAX_COMPILES = 4
DEFAULT_MAX_COMPILES_NAMESPACE = 0  # unlimited: the cluster-wide cap alone
# The compile pod logs its step at least this often (its heartbeat): reading more often
# would show the same step.
DEFAULT_PROGRESS = float(HEARTBEAT_SECONDS)
# How long an unused cache key stays on the volume. A key costs disk (GBs) while unused and
# a compile (20-60 min of CPU or cards) when it is needed again: a week keeps what a fleet
# rolled away from over a weekend or a release cycle, and still frees it within one.
DEFAULT_CACHE_RETENTION = "7d"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d+)([smhd]?)$")


def duration_seconds(text: str) -> int:
    """A duration such as 7d, 12h, 30m, 45s (a bare number is seconds); 0 is 0."""
    found = _DURATION.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r}: use a whole number with a unit, e.g. 7d, 12h, 30m, 45s or 0")
    return int(found.group(1)) * _UNITS[found.group(2) or "s"]


def cache_retention() -> int:
    """Seconds an unused cache key stays on the volume before its clean-up; 0: forever."""
    return duration_seconds(os.environ.get(CACHE_RETENTION_ENV) or DEFAULT_CACHE_RETENTION)


def resync_seconds() -> float:
    """Interval of the level-based safety-net reconcile of every SpyreModel."""
    return float(os.environ.get(RESYNC_ENV, DEFAULT_RESYNC))


def namespaces() -> list[str]:
    """The watched namespaces (`run --namespace`, comma-separated); none: all."""
    return [ns for ns in os.environ.get(NAMESPACES_ENV, "").split(",") if ns]


def workers() -> int:
    return int(os.environ.get(WORKERS_ENV, DEFAULT_WORKERS))


def compile_limits() -> tuple[int, int]:
    """Compile Jobs running at once, in all watched namespaces and in one (0: unlimited)."""
    cluster = int(os.environ.get(MAX_COMPILES_ENV) or DEFAULT_MAX_COMPILES)
    namespace = int(os.environ.get(MAX_COMPILES_NAMESPACE_ENV) or DEFAULT_MAX_COMPILES_NAMESPACE)
    if cluster < 0 or namespace < 0:
        raise ValueError(f"{MAX_COMPILES_ENV}, {MAX_COMPILES_NAMESPACE_ENV}: 0 (unlimited) or more")
    return cluster, namespace


def progress_seconds() -> float:
    """How often a running compile's progress is read from its pod's log (0: never)."""
    value = float(os.environ.get(PROGRESS_ENV) or DEFAULT_PROGRESS)
    if value < 0:
        raise ValueError(f"{PROGRESS_ENV}: 0 (off) or more seconds")
    return value


def metrics_port() -> int:
    return int(os.environ.get(METRICS_ENV, "0"))


def platform() -> Platform:
    """Where the workload pods run: `openshift` leaves fsGroup to the SCC (render/pod.py)."""
    value = os.environ.get(PLATFORM_ENV) or PLATFORMS[0]
    if value not in PLATFORMS:
        raise ValueError(f"{PLATFORM_ENV}={value!r}: use one of {', '.join(PLATFORMS)}")
    return value


# ----- the serving image (api/runtimes.RuntimeImages) ----------------------------------
RUNTIME_IMAGE_REPOSITORY_ENV = "SPYRE_OPERATOR_RUNTIME_IMAGE_REPOSITORY"
RUNTIME_IMAGE_PULL_SECRETS_ENV = "SPYRE_OPERATOR_RUNTIME_IMAGE_PULL_SECRETS"  # comma-separated


def runtime_images() -> RuntimeImages:
    """Where the serving images come from and the Secrets the workload pods pull with;
    ValueError naming the flag when a value is wrong."""
    repository = os.environ.get(RUNTIME_IMAGE_REPOSITORY_ENV) or IMAGE_REPOSITORY
    secrets = tuple(s for s in os.environ.get(RUNTIME_IMAGE_PULL_SECRETS_ENV, "").split(",") if s)
    try:
        return RuntimeImages(repository, secrets)
    except ValueError as err:
        raise ValueError(f"--runtime-image-repository/--runtime-image-pull-secret: {err}") from None


# ----- the admission webhook (spyre_operator.webhook) ----------------------------------
WEBHOOK_PORT_ENV = "SPYRE_OPERATOR_WEBHOOK_PORT"
WEBHOOK_CERT_DIR_ENV = "SPYRE_OPERATOR_WEBHOOK_CERT_DIR"
WEBHOOK_SECRET_ENV = "SPYRE_OPERATOR_WEBHOOK_SECRET"
WEBHOOK_CONFIGURATION_ENV = "SPYRE_OPERATOR_WEBHOOK_CONFIGURATION"
WEBHOOK_HOSTS_ENV = "SPYRE_OPERATOR_WEBHOOK_HOSTS"  # comma-separated
WEBHOOK_CHECK_ENV = "SPYRE_OPERATOR_WEBHOOK_CHECK_SECONDS"
DEFAULT_WEBHOOK_CHECK = 300.0


@dataclass(frozen=True)
class Webhook:
    port: int
    cert_dir: str | None  # certificate files someone else keeps (cert-manager)
    secret: tuple[str, str] | None  # (namespace, name): the operator keeps them there
    configuration: str | None  # the ValidatingWebhookConfiguration whose caBundle it keeps
    hosts: tuple[str, ...]  # the serving certificate's names (DNS names or IP addresses)
    check_seconds: float


def webhook() -> Webhook | None:
    """The webhook's settings, None when it is off; ValueError saying what is missing."""
    port = int(os.environ.get(WEBHOOK_PORT_ENV) or 0)
    if not port:
        return None
    cert_dir = os.environ.get(WEBHOOK_CERT_DIR_ENV) or None
    secret = os.environ.get(WEBHOOK_SECRET_ENV) or None
    hosts = tuple(h for h in os.environ.get(WEBHOOK_HOSTS_ENV, "").split(",") if h)
    if (cert_dir is None) == (secret is None):
        raise ValueError(
            "the webhook needs exactly one certificate source: --webhook-secret NAMESPACE/NAME "
            "(the operator keeps its own) or --webhook-cert-dir DIR (files someone else keeps, "
            "e.g. cert-manager)"
        )
    namespace, _, name = (secret or "").partition("/")
    if secret is not None and not (namespace and name):
        raise ValueError(f"--webhook-secret {secret}: use NAMESPACE/NAME")
    if secret is not None and not hosts:
        raise ValueError(
            "--webhook-secret needs --webhook-host (the name the API server reaches the "
            "operator by, e.g. SERVICE.NAMESPACE.svc, or 127.0.0.1)"
        )
    return Webhook(
        port=port,
        cert_dir=cert_dir,
        secret=(namespace, name) if secret else None,
        configuration=os.environ.get(WEBHOOK_CONFIGURATION_ENV) or None,
        hosts=hosts,
        check_seconds=float(os.environ.get(WEBHOOK_CHECK_ENV) or DEFAULT_WEBHOOK_CHECK),
    )
