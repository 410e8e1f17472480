"""kopf handlers: decorators only, each a few lines calling spyre_operator.reconcile.

Every trigger runs the same level-based reconcile (reconcile/engine.py): create, update
and resume of a SpyreModel, a periodic resync (the safety net against lost events), and
changes of the Jobs, Deployments, Services and Pods the operator manages. Handlers return
None: kopf writes nothing into the (strict) status.
"""

from __future__ import annotations

from typing import Any

import kopf

from spyre_operator.api.names import GROUP, PLURAL, VERSION
from spyre_operator.reconcile import options, wiring

RESYNC = options.resync_seconds()


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    wiring.configure(settings, memo)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def spyremodel_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    wiring.reconcile_body(memo.reconciler, body)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC, initial_delay=RESYNC)
def resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    wiring.reconcile_body(memo.reconciler, body)


@kopf.on.event("batch", "v1", "jobs", labels=wiring.MANAGED)
@kopf.on.event("apps", "v1", "deployments", labels=wiring.MANAGED)
@kopf.on.event("", "v1", "services", labels=wiring.MANAGED)
def child_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    wiring.child_changed(memo.reconciler, type, body)


@kopf.on.event("", "v1", "pods", labels=wiring.MANAGED)
def pod_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    wiring.pod_changed(memo.reconciler, type, body)


@kopf.on.probe(id="reconciles")
def reconciles(memo: kopf.Memo, **_: Any) -> int:
    return int(memo.reconciler.stats["reconciles"])
