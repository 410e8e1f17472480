"""Events: names that make a repeat harmless, and POSTs tried again when they may pass."""

from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest
import urllib3

from spyre_operator.controller import events
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.conditions import Event, event_name

pytestmark = pytest.mark.unit

BODY = {"metadata": {"name": "m", "namespace": "ns", "uid": "u1"}}
WHEN = datetime.datetime(2026, 11, 23, tzinfo=datetime.UTC)


class Answers(Kube):
    """create() answers with the given failures first, then keeps what it got."""

    def __init__(self, *failures: Exception) -> None:
        super().__init__(api=None)
        self.failures = list(failures)
        self.posted: list[dict[str, Any]] = []
        self.attempts = 0

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.attempts += 1
        if self.failures:
            raise self.failures.pop(0)
        self.posted.append(obj)
        return obj


@pytest.fixture
def poster(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(events.EventPoster, "PAUSE_SECONDS", 0.0)

    def make(kube: Kube) -> events.EventPoster:
        made = events.EventPoster(kube)
        made.close()  # post() is called directly here
        return made

    return make


def test_a_timed_out_or_overloaded_post_is_tried_again(poster: Any) -> None:
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/", "timed out")  # type: ignore[arg-type]
    kube = Answers(timeout, ApiError(503, "x"))
    poster(kube).post(events.event_object(BODY, Event("Normal", "Ready", "up"), WHEN))
    assert (kube.attempts, [o["reason"] for o in kube.posted]) == (3, ["Ready"])


def test_already_posted_is_done_and_a_refusal_is_one_line(
    poster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    kube = Answers(ApiError(409, "AlreadyExists"))
    poster(kube).post(events.event_object(BODY, Event("Normal", "Ready", "up"), WHEN, "m.1"))
    assert kube.attempts == 1 and not caplog.records
    kube = Answers(ApiError(403, "Forbidden"))
    with caplog.at_level(logging.WARNING):
        poster(kube).post(events.event_object(BODY, Event("Normal", "Ready", "up"), WHEN))
    assert kube.attempts == 1
    (record,) = caplog.records
    assert "could not post Event Ready" in record.getMessage() and record.exc_info is None


def test_a_post_that_keeps_failing_gives_up_after_its_attempts(poster: Any) -> None:
    kube = Answers(*[ApiError(500, "x")] * 5)
    poster(kube).post(events.event_object(BODY, Event("Normal", "Ready", "up"), WHEN))
    assert (kube.attempts, kube.posted) == (events.EventPoster.ATTEMPTS, [])


def test_every_event_is_named_before_its_first_attempt() -> None:
    obj = events.event_object(BODY, Event("Normal", "Ready", "up"), WHEN)
    assert obj["metadata"]["name"].startswith("m.") and "generateName" not in obj["metadata"]
    long = {"metadata": {**BODY["metadata"], "name": "a" * 235 + "-b" + "c" * 16}}
    name = events.event_object(long, Event("Normal", "Ready", "up"), WHEN)["metadata"]["name"]
    assert len(name) <= 253 and ".-" not in name and "-." not in name


def test_a_transitions_name_follows_the_stored_status_it_was_decided_from() -> None:
    ready = Event("Normal", "Ready", "up")
    old = {"phase": "Starting", "conditions": [{"type": "Ready", "status": "False"}]}
    again = Event("Normal", "Ready", "up (and what was written on the way)")
    assert event_name(BODY, old, ready) == event_name(BODY, dict(old), again)
    assert event_name(BODY, old, ready) != event_name(BODY, {"phase": "Compiling"}, ready)
    assert event_name(BODY, old, ready) != event_name(BODY, old, Event("Warning", "Degraded", ""))
    other = {"metadata": {**BODY["metadata"], "uid": "u2"}}  # deleted and created again
    assert event_name(BODY, old, ready) != event_name(other, old, ready)
