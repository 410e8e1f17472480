"""kopf handlers: decorators only, each a few lines calling spyre_operator.reconcile.

Every trigger queues the same level-based reconcile (reconcile/engine.py, run by the
workers of controller/workqueue.py): any event of a
SpyreModel (including the listing at start-up, which is the resume), the operator's own
periodic resync (the safety net against lost events, a thread started at start-up), and
changes of the Jobs, Deployments, Services, NetworkPolicies and Pods the operator
manages. Only kopf's event and index handlers are used, so kopf itself never writes to a
SpyreModel: no finalizer, no annotations, nothing in the (strict) status; failed
reconciles are retried by the queue. kopf watches only SpyreModels and SpyreCaches: the
children (and the cache PVCs) are watched by kube/watches.py, filtered by label on the
API server (kopf filters labels itself, after receiving every object), and read from its
stores, not with GETs. With `--webhook-port`, a validating admission webhook
(spyre_operator.webhook) refuses invalid SpyreModels and SpyreCaches at `kubectl apply`.
"""

from __future__ import annotations

from typing import Any

import kopf

from spyre_operator import settings as operator_settings
from spyre_operator.api.names import CACHE_KIND, CACHE_PLURAL, GROUP, KIND, PLURAL, VERSION
from spyre_operator.controller import indexes, triggers, wiring

SETTINGS = operator_settings.current()  # `run`'s flags, or the environment
IMAGES = SETTINGS.runtime_images  # what validation judges a spec without spec.image by
WEBHOOK = bool(SETTINGS.webhook_port)  # off: kopf refuses admission handlers without a server


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    wiring.configure(SETTINGS, settings, memo, kwargs)  # kwargs hold the indexes below, by id
    if WEBHOOK:
        webhook.configure(settings, SETTINGS)


if WEBHOOK:
    from spyre_operator.webhook import server as webhook  # aiohttp and cryptography only then

    # One handler (one id: the URL path) for both kinds; kopf picks it by id and resource.
    @kopf.on.validate(GROUP, VERSION, PLURAL, id=webhook.HANDLER_ID, operations=webhook.OPERATIONS)
    @kopf.on.validate(
        GROUP, VERSION, CACHE_PLURAL, id=webhook.HANDLER_ID, operations=webhook.OPERATIONS
    )
    def admission(body: kopf.Body, warnings: list[str], **kwargs: Any) -> None:
        webhook.admit(kwargs["operation"], body, kwargs.get("old"), warnings, IMAGES)


@kopf.on.cleanup()
def cleanup(memo: kopf.Memo, **_: Any) -> None:
    wiring.shutdown(memo)


@kopf.index(GROUP, VERSION, PLURAL, id=indexes.MODELS)
@kopf.index(GROUP, VERSION, CACHE_PLURAL, id=indexes.CACHES)
def spyremodels(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return indexes.model_entry(body, IMAGES)  # what the reconciles and the compile queue read


@kopf.on.event(GROUP, VERSION, PLURAL)
def spyremodel_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    triggers.model_event(memo.controllers[KIND], type, body)


@kopf.on.event(GROUP, VERSION, CACHE_PLURAL)
def spyrecache_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    triggers.model_event(memo.controllers[CACHE_KIND], type, body)


@kopf.on.probe(id="reconciles")
def reconciles(memo: kopf.Memo, **_: Any) -> int:
    reconciled: int = memo.queue.stats["reconciles"]
    return reconciled
