"""The operator's settings as environment variables (set by `spyre-operator run` from its
flags, or directly when running `kopf run -m spyre_operator.handlers`). No kopf import:
the CLI reads the defaults without loading the operator."""

from __future__ import annotations

import os

from spyre_operator.render.pod import PLATFORMS, Platform

RESYNC_ENV = "SPYRE_OPERATOR_RESYNC_SECONDS"
METRICS_ENV = "SPYRE_OPERATOR_METRICS_PORT"
WORKERS_ENV = "SPYRE_OPERATOR_WORKERS"
PLATFORM_ENV = "SPYRE_OPERATOR_PLATFORM"
DEFAULT_RESYNC = 300.0
DEFAULT_WORKERS = 16


def resync_seconds() -> float:
    """Interval of the level-based safety-net reconcile of every SpyreModel."""
    return float(os.environ.get(RESYNC_ENV, DEFAULT_RESYNC))


def workers() -> int:
    return int(os.environ.get(WORKERS_ENV, DEFAULT_WORKERS))


def metrics_port() -> int:
    return int(os.environ.get(METRICS_ENV, "0"))


def platform() -> Platform:
    """Where the workload pods run: `openshift` leaves fsGroup to the SCC (render/pod.py)."""
    value = os.environ.get(PLATFORM_ENV) or PLATFORMS[0]
    if value not in PLATFORMS:
        raise ValueError(f"{PLATFORM_ENV}={value!r}: use one of {', '.join(PLATFORMS)}")
    return value
