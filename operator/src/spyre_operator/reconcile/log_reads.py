"""A pod's log read in a reconcile (a serving pod's start-up report, a compile pod's
progress): what a failed read raises, and each kind of failure logged once. A failed read
is left out (tried again later); it never fails the reconcile."""

from __future__ import annotations

import threading

import urllib3

from spyre_operator.kube.client import ApiError

# The API server's refusal; a timeout or a dropped connection to it (urllib3's own errors:
# Kube.log_tail tries once, so they come as they are); a socket error.
FAILURES = (ApiError, urllib3.exceptions.HTTPError, OSError, ValueError)


class FirstFailures:
    """The kinds of failure seen so far (a 403, a 404, a timeout, ...): thread-safe."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._guard = threading.Lock()

    def first(self, err: Exception) -> bool:
        """True the first time a failure of this kind comes (log it then)."""
        kind = f"http_{err.status}" if isinstance(err, ApiError) else type(err).__name__
        with self._guard:
            new = kind not in self._seen
            self._seen.add(kind)
        return new
