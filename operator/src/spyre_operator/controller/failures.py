"""What the loop says and counts of a failed reconcile (workqueue.py)."""

from __future__ import annotations

import logging
from typing import Protocol

from spyre_operator.kube.client import ApiError, one_line

log = logging.getLogger("spyre_operator.reconcile.engine")  # where the reconciles log

Key = tuple[str, str, str]  # (kind, namespace, name)


class Complain(Protocol):
    def __call__(self, key: Key, err: Exception, delay: float, before: str | None) -> str:
        """Log a failed run, retried in `delay` seconds; `before`: what was said of the
        failure before it in a row (None: the first). Returns what it said."""


def complain(key: Key, err: Exception, delay: float, before: str | None) -> str:
    """One line per attempt, except a refusal, which the status explains: said once, and
    again only when it changes. A traceback only for the first failure of an unexpected
    kind (a bug)."""
    said = one_line(err) if isinstance(err, ApiError) else f"{type(err).__name__}: {one_line(err)}"
    where = f"{key[1]}/{key[2]}"
    if isinstance(err, ApiError) and err.refused:
        if said != before:
            log.warning("%s: %s (tried again after a growing pause)", where, said)
    elif isinstance(err, ApiError) or said == before:
        log.warning("%s: %s (again in %gs)", where, said, delay)
    else:
        log.exception("reconciling %s (again in %gs)", where, delay, exc_info=err)
    return said


def reason(err: Exception) -> str:
    """A failure's reason in the metrics: the API status code, or the error's type."""
    return f"http_{err.status}" if isinstance(err, ApiError) else type(err).__name__
