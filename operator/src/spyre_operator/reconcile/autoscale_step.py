"""The autoscale step (pure): spec.autoscaling as a KEDA ScaledObject that scales the
SpyreModel, within what the nodes' cards hold (capacity.py); the Autoscaling condition and
status.autoscaling.

The ScaledObject is made once the spec's key is compiled: load only ever changes
spec.replicas, which the serve step carries to a Deployment of a compiled key, so no
replica starts before its key is compiled and load never starts a compile. Removed from
the spec, the ScaledObject is deleted (status.autoscaling says one was made); a deleted
SpyreModel takes it along (its owner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import AUTOSCALING, AutoscalingStatus
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.capacity import Capacity, capacity
from spyre_operator.reconcile.conditions import Cond
from spyre_operator.reconcile.drift import needs_apply
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action
from spyre_operator.render.autoscaler import SCALED_OBJECT, scaled_object
from spyre_operator.render.cachekey import short_key
from spyre_operator.render.children import Desired

ENGINE = "KEDA's ScaledObject (scaledobjects.keda.sh)"


@dataclass(frozen=True)
class AutoscaleStep:
    actions: list[Action]
    condition: Cond | None  # None: no spec.autoscaling
    status: AutoscalingStatus | None


def autoscale_step(
    obs: Observed, model: SpyreModel, want: Desired, key: str | None, ready: bool, prometheus: str
) -> AutoscaleStep:
    """`key`, `ready`: the spec's cache key and whether it is compiled; `prometheus`: the
    operator's --prometheus-address."""
    scaling, found = model.spec.autoscaling, obs.autoscaler
    live = found.live if found is not None else None
    if scaling is None:
        if live is None:
            return AutoscaleStep([], None, None)
        kept = ("name", "namespace", "resourceVersion")
        me: dict[str, Any] = {
            "kind": SCALED_OBJECT,
            "metadata": {k: live["metadata"][k] for k in kept},
        }
        said = f"deleted ScaledObject {model.name}: spec.autoscaling was removed"
        going = AutoscalingStatus(scaled_object=model.name)  # read again until it is gone
        return AutoscaleStep([Action("delete", me, "DeletedScaledObject", said)], None, going)
    cards = _capacity(obs, model, want)
    most = scaling.max_replicas
    if cards is not None:
        most = max(1, min(most, cards.on_nodes))
    status = AutoscalingStatus(
        scaled_object=live["metadata"]["name"] if live else None,
        min_replicas=min(scaling.min_replicas, most),
        max_replicas=most,
        cards_per_replica=cards.per_replica if cards else 0,
        replicas_on_nodes=cards.on_nodes if cards else None,
        replicas_now=cards.now if cards else None,
    )
    if found is not None and not found.served:
        return AutoscaleStep([], _not_installed(), status)
    if not prometheus:
        return AutoscaleStep([], _no_prometheus(), status)
    if not ready and live is None:
        waits = f"the ScaledObject is made once cache {short_key(key or '')} is compiled"
        if key is None:
            waits = "the ScaledObject is made once the weights are downloaded and compiled"
        return AutoscaleStep([], Cond(AUTOSCALING, "False", "WaitingForCache", waits), status)
    assert obs.uid
    manifest = scaled_object(model, obs.uid, prometheus, most)
    actions = []
    if needs_apply(manifest, live):
        verb = "Created" if live is None else "Updated"
        said = f"{verb.lower()} ScaledObject {model.name}"
        actions.append(Action("apply", manifest, f"{verb}ScaledObject", said))
    named = status.model_copy(update={"scaled_object": model.name})
    return AutoscaleStep(actions, _condition(model, live, cards, most), named)


def _capacity(obs: Observed, model: SpyreModel, want: Desired) -> Capacity | None:
    """None: a replica holds no cards, or the nodes were not read (or the pod not known)."""
    spec = model.spec
    if obs.cards is None or want.deployment is None or not spec.accelerator_count:
        return None
    nodes, pods = obs.cards
    deploy = obs.deployment
    refused = len(obs.unschedulable) if deploy else 0
    placed = max(0, (deploy.replicas if deploy else 0) - refused)
    pod = want.deployment["spec"]["template"]["spec"]
    resource = spec.accelerator.resource_name
    return capacity(nodes, pods, pod, resource, spec.accelerator_count, placed, refused)


def _condition(
    model: SpyreModel, live: dict[str, Any] | None, cards: Capacity | None, most: int
) -> Cond:
    scaling = model.spec.autoscaling
    assert scaling is not None
    metric, per_replica = scaling.metric
    keda = _keda_ready(live)
    if keda is not None and keda[0] == "False":
        return Cond(
            AUTOSCALING,
            "False",
            "EngineNotReady",
            f"KEDA: {keda[2] or keda[1]} (kubectl describe scaledobject {model.name})",
        )
    if cards is not None and cards.on_nodes == 0:
        return Cond(AUTOSCALING, "False", "NoCards", cards.why + ": no replica can run")
    message = (
        f"ScaledObject {model.name} scales {scaling.min_replicas}-{most} replicas on "
        f"{metric} {per_replica} per replica"
    )
    if cards is not None:
        message += f"; {cards.now} can run now ({cards.why})"
    if most < scaling.max_replicas:
        message += (
            f"; spec.autoscaling.maxReplicas {scaling.max_replicas} is above the "
            f"{most} the nodes' cards hold: the autoscaler gets {most}"
        )
        return Cond(AUTOSCALING, "True", "LimitedByCards", message)
    return Cond(AUTOSCALING, "True", "Scaling", message)


def _keda_ready(live: dict[str, Any] | None) -> tuple[str, str, str] | None:
    """KEDA's Ready condition of the ScaledObject (status, reason, message)."""
    for c in ((live or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status", "Unknown"), c.get("reason", ""), c.get("message", "")
    return None


def _not_installed() -> Cond:
    return Cond(
        AUTOSCALING,
        "False",
        "EngineNotInstalled",
        f"the API server does not serve {ENGINE}: install KEDA (2.x) in the cluster "
        "(docs/install.md, Autoscaling); until then spec.replicas is used as it is",
    )


def _no_prometheus() -> Cond:
    return Cond(
        AUTOSCALING,
        "False",
        "NoPrometheus",
        "the operator has no Prometheus address to read vLLM's metrics from: set the "
        "chart's operator.prometheusAddress (--prometheus-address), with the serving "
        "monitor on (monitoring.serving.enabled)",
    )
