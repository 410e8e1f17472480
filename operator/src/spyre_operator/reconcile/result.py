"""What a reconcile asks of the loop that ran it (controller/workqueue.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    """`requeue_after`: run again in this many seconds without an event (a running
    compile's progress, a retention); `later`: run again once no reconcile a trigger asked
    for waits (its key's inventory entry waited behind them); `gone`: the object is gone
    (or being deleted), what is kept about it can go. A reconcile that fails raises
    instead: the loop tries it again after a pause."""

    requeue_after: float | None = None
    later: bool = False
    gone: bool = False
