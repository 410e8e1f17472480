"""Posting core/v1 Events on SpyreModels and SpyreCaches."""

from __future__ import annotations

import datetime
import logging
import queue
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.conditions import Event, clip, event_object_name

log = logging.getLogger(__name__)

EVENT_MESSAGE_LIMIT = 1024
HOST = socket.gethostname()  # the pod's name in a cluster: which replica said it


class EventPoster:
    """Posts core/v1 Events on SpyreModels. Phase transitions are posted at once (the
    reconcile waits: their status is written only after them, see conditions.event_name),
    the rest from one background thread, in order, so a reconcile never waits for them.
    Every Event has its name before the first attempt, so a POST that timed out but landed
    is AlreadyExists when tried again. Events are informative: a failure is logged, never
    fails anything."""

    ATTEMPTS = 3
    PAUSE_SECONDS = 1.0  # before the second attempt, doubled before each one after it

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="events", daemon=True)
        self.thread.start()

    def __call__(self, body: Mapping[str, Any], event: Event, name: str | None = None) -> None:
        obj = event_object(body, event, datetime.datetime.now(datetime.UTC), name)
        if name is None:
            self.queue.put(obj)
        else:
            self.post(obj)

    def close(self, timeout: float = 5.0) -> None:
        """Post what is queued (for at most `timeout` seconds), then stop."""
        self.queue.put(None)
        self.thread.join(timeout)

    def _loop(self) -> None:
        while (obj := self.queue.get()) is not None:
            self.post(obj)

    def post(self, obj: dict[str, Any]) -> None:
        """Create the Event; a timeout, 429 or 5xx is tried again (ATTEMPTS in all)."""
        for attempt in range(self.ATTEMPTS):
            if attempt:
                time.sleep(self.PAUSE_SECONDS * 2 ** (attempt - 1))
            try:
                self.kube.create(obj)
                return
            except ApiError as err:
                if err.conflict:
                    return  # posted by an earlier attempt (or an earlier operator)
                failure: Exception = err
                if err.status != 429 and err.status < 500:
                    break
            except Exception as err:  # timeouts, refused connections: try again
                failure = err
        involved = obj["involvedObject"]
        log.warning(
            "%s/%s: could not post Event %s: %s",
            involved["namespace"],
            involved["name"],
            obj["reason"],
            failure,
        )


def event_object(
    body: Mapping[str, Any], event: Event, when: datetime.datetime, name: str | None = None
) -> dict[str, Any]:
    """A core/v1 Event; without a name, kubectl's kind: the object's name and a unique
    suffix."""
    metadata, stamp = body["metadata"], when.isoformat()
    if name is None:
        name = event_object_name(metadata["name"], uuid.uuid4().hex[:16])
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"namespace": metadata["namespace"], "name": name},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": body.get("kind") or KIND,
            "namespace": metadata["namespace"],
            "name": metadata["name"],
            "uid": metadata["uid"],
        },
        "type": event.type,
        "reason": event.reason,
        "message": clip(event.message, EVENT_MESSAGE_LIMIT),
        "source": {"component": "spyre-operator", "host": HOST},
        "reportingComponent": "spyre-operator",
        "reportingInstance": HOST,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
