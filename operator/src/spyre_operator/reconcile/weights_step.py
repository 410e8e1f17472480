"""The weights step (pure): the cache volume a spec creates, and a hub model's download
(the weights Job, shared by every SpyreModel of that model and revision), which resolves
the revision to the commit the cache key is made of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import WeightsSummary
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.cache_status import Failure
from spyre_operator.reconcile.conditions import Event
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action, shared_job
from spyre_operator.reconcile.weights_status import weights_commit
from spyre_operator.render.children import Desired


@dataclass(frozen=True)
class WeightsStep:
    actions: list[Action]  # create the volume, create or join the weights Job
    commit: str | None  # what a hub model's revision resolved to
    ready: bool  # the key is known: not a hub model, or its commit is
    failure: Failure | None = None  # the download failed (the key is not known)


def weights_step(obs: Observed, model: SpyreModel, want: Desired) -> WeightsStep:
    spec = model.spec
    actions: list[Action] = []
    if want.pvc is not None and obs.pvc_exists is False:
        claim = spec.cache.volume.claim_name
        said = f"created PersistentVolumeClaim {claim}"
        actions.append(Action("create", want.pvc, "CreatedCacheVolume", said))
    if want.weights is not None and not obs.inventory:  # an entry's commit is pinned
        name = want.weights["metadata"]["name"]
        hub_model = f"{spec.model.id} at revision {spec.model.hub_revision}"
        actions += shared_job(
            model,
            obs.uid,
            obs.weights_job,
            want.weights,
            ("CreatedWeightsJob", f"downloading {hub_model} in Job {name}"),
            ("SharedWeightsJob", f"uses Job {name} of another SpyreModel downloading {hub_model}"),
        )
    weights = obs.weights
    commit = weights_commit(weights)
    if spec.model.from_hub and commit is None:
        failure = None
        if weights is not None and weights.state == "Failed":
            failure = Failure(weights.reason or "", weights.message or "")
        return WeightsStep(actions, None, False, failure)
    return WeightsStep(actions, commit, True)


def revision_event(old: dict[str, Any], weights: WeightsSummary | None) -> list[Event]:
    """The revision now names another commit than the one compiled before: said once.
    `old` is the stored status."""
    before = (old.get("weights") or {}).get("commit")
    commit = weights_commit(weights)
    if weights is None or commit is None or before in (None, commit):
        return []
    return [
        Event(
            "Normal",
            "RevisionMoved",
            f"{weights.model_id} revision {weights.revision} is now commit {commit[:12]} "
            f"(was {before[:12]}): a new cache key; the Deployment keeps the old one until "
            "it is compiled",
        )
    ]
