"""Pull instead of compile (pure; docs/cache-sharing.md): with a cache registry, a key
that is not compiled is first fetched by the key's pull Job (no card, not in the compile
queue); the compile Job is created only once the pull Job failed: the registry has no
copy for the key and architecture, its copy was refused, or it cannot be reached. The
pull Job's summary says which, and the compile's Event repeats it.

A failed pull Job is the registry's answer for RETRY_SECONDS after it failed. A key that
still has no compile Job after that (it waits in the compile queue, or its compile Job was
deleted or cleaned up) asks again: the failed pull Job is deleted and the next pass makes
a new one. A key whose compile Job exists is left to it.

A pull Job that succeeded holds the key in the inventory as a compile Job does
(reconcile/inventory.py): the key's users own it, its inventory entry joins it, and the
clean-up marks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.runtimes import CacheSharing
from spyre_operator.api.status import CompileSummary
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.inventory import epoch_seconds
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.plan import Action, shared_job
from spyre_operator.reconcile.views import JobView
from spyre_operator.render import meta
from spyre_operator.render.cachekey import short_key
from spyre_runtime.contract import Summary


@dataclass(frozen=True)
class PullStep:
    """What the pull path asks of this pass."""

    wait: bool = False  # create the pull Job, or wait for it: no compile Job yet
    pulled: CompileSummary | None = None  # the key is on the volume, READY: no compile
    missed: str | None = None  # why the key compiles after all
    retry: bool = False  # delete the failed pull Job: its answer is old (wait is set too)
    retry_in: float | None = None  # a miss: seconds until it is old

    @property
    def pulling(self) -> bool:
        """The pull Job is on its way (status.cache names it)."""
        return self.wait or self.retry


OFF = PullStep()
RETRY_SECONDS = 600.0  # how long a failed pull is the registry's answer for its key


def _age(finished_at: str | None, now: str) -> float | None:
    return epoch_seconds(now) - epoch_seconds(finished_at) if finished_at else None


def pull_step(
    sharing: bool, key: str, compile_job: JobView | None, pull_job: JobView | None, now: str
) -> PullStep:
    """The step for a key that is not ready on the volume. A compile Job of the key that
    exists already (made before the registry was configured, or after a miss) wins."""
    if not sharing or compile_job is not None:
        return OFF
    if pull_job is None or not (pull_job.succeeded or pull_job.failed):
        return PullStep(wait=True)
    age = _age(pull_job.finished_at, now) if pull_job.failed else None
    if age is not None and age >= RETRY_SECONDS:
        return PullStep(wait=True, retry=True)
    said: Summary = (pull_job.terminated.summary if pull_job.terminated else None) or {"ok": False}
    if pull_job.succeeded:
        moved: dict[str, Any] = dict(said.get("pulled") or {})
        return PullStep(
            pulled=CompileSummary(
                job_name=pull_job.name,
                cache_key=key,
                ok=True,
                seconds=said.get("seconds"),
                bytes=said.get("bytes"),
                pulled_from=moved.get("reference"),
                bytes_moved=moved.get("bytes"),
            )
        )
    retry_in = None if age is None else RETRY_SECONDS - age
    if said.get("reason"):
        return PullStep(missed=f"{said['reason']}: {said.get('message', '')}", retry_in=retry_in)
    why = pull_job.failed_message or pull_job.failed_reason or "it failed without a summary"
    return PullStep(missed=f"pull Job {pull_job.name}: {why}", retry_in=retry_in)


def pull_actions(
    model: SpyreModel,
    obs: Observed,
    manifest: dict[str, Any] | None,
    key: str,
    sharing: CacheSharing | None,
    step: PullStep,
) -> list[Action]:
    """Delete a failed pull Job whose answer is old; create the key's pull Job, or join
    it as one more user of the key (while it runs, or once it pulled the key)."""
    if step.retry:
        assert obs.pull_job is not None and sharing is not None
        target, said = retry_action(obs.pull_job, key, model.namespace, sharing.repository)
        return [Action("delete", target, "RetryingPull", said)]
    if not step.wait and step.pulled is None:
        return []
    assert manifest is not None and sharing is not None  # a pull step: sharing is on
    name = manifest["metadata"]["name"]
    return shared_job(
        model,
        obs.uid,
        obs.pull_job,
        manifest,
        ("CreatedPullJob", f"pulling cache {short_key(key)} from {sharing.repository}"),
        ("SharedPullJob", f"uses Job {name} of another SpyreModel with the same key"),
    )


def key_holder(compile_job: JobView | None, pull_job: JobView | None) -> JobView | None:
    """The Job that holds the key in the inventory: its compile Job, else a pull Job that
    succeeded (its owners are the key's users, its mark starts the key's clean-up)."""
    if compile_job is not None:
        return compile_job
    return pull_job if pull_job is not None and pull_job.succeeded else None


def retry_action(
    pull_job: JobView, key: str, namespace: str, repository: str
) -> tuple[dict[str, Any], str]:
    """The delete of a failed pull Job whose answer is old (guarded by the version seen,
    so a pass that decided from an older view deletes no newer Job), and its Event."""
    target = {
        "kind": "Job",
        "metadata": {
            "name": pull_job.name,
            "namespace": namespace,
            "resourceVersion": pull_job.resource_version,
        },
    }
    said = (
        f"asking {repository} again for cache {short_key(key)}: pull Job "
        f"{pull_job.name} failed at {pull_job.finished_at}, over {RETRY_SECONDS:.0f}s ago"
    )
    return target, said


def pulling(key: str) -> CompileSummary:
    """status.cache while the pull Job runs."""
    return CompileSummary(job_name=meta.pull_job_name(key), cache_key=key)


def not_used(missed: str | None) -> str:
    """What the compile's Event and CacheReady add when the key compiles although a cache
    registry is configured (`missed`: status.cache.notPulled)."""
    return f"; the registry's copy was not used: {missed}" if missed else ""


def carry_miss(cache: CompileSummary, step: PullStep, recorded: dict[str, Any]) -> None:
    """status.cache.notPulled: set by the pass that gives up on the registry, kept by the
    compile's summary while it runs and after (`recorded`: the stored status.cache)."""
    if step.missed is not None:
        cache.not_pulled = step.missed
    elif cache.not_pulled is None and recorded.get("jobName") == cache.job_name:
        cache.not_pulled = recorded.get("notPulled")
