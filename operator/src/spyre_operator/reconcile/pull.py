"""Pull instead of compile (pure; docs/cache-sharing.md): with a cache registry, a key
that is not compiled is first fetched by the key's pull Job (no card, not in the compile
queue); the compile Job is created only once the pull Job failed: the registry has no
copy for the key and architecture, its copy was refused, or it cannot be reached. The
pull Job's summary says which, and the compile's Event repeats it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import CompileSummary
from spyre_operator.reconcile.observe import JobView
from spyre_operator.render import meta
from spyre_runtime.contract import Summary


@dataclass(frozen=True)
class PullStep:
    """What the pull path asks of this pass."""

    wait: bool = False  # create the pull Job, or wait for it: no compile Job yet
    pulled: CompileSummary | None = None  # the key is on the volume, READY: no compile
    missed: str | None = None  # why the key compiles after all


OFF = PullStep()


def pull_step(
    sharing: bool, key: str, compile_job: JobView | None, pull_job: JobView | None
) -> PullStep:
    """The step for a key that is not ready on the volume. A compile Job of the key that
    exists already (made before the registry was configured, or after a miss) wins."""
    if not sharing or compile_job is not None:
        return OFF
    if pull_job is None or not (pull_job.succeeded or pull_job.failed):
        return PullStep(wait=True)
    said: Summary = (pull_job.terminated.summary if pull_job.terminated else None) or {"ok": False}
    if pull_job.succeeded:
        moved: dict[str, Any] = dict(said.get("pulled") or {})
        return PullStep(
            pulled=CompileSummary(
                job_name=pull_job.name,
                cache_key=key,
                ok=True,
                seconds=said.get("seconds"),
                pulled_from=moved.get("reference"),
                bytes_moved=moved.get("bytes"),
            )
        )
    if said.get("reason"):
        return PullStep(missed=f"{said['reason']}: {said.get('message', '')}")
    why = pull_job.failed_message or pull_job.failed_reason or "it failed without a summary"
    return PullStep(missed=f"pull Job {pull_job.name}: {why}")


def pulling(key: str) -> CompileSummary:
    """status.cache while the pull Job runs."""
    return CompileSummary(job_name=meta.pull_job_name(key), cache_key=key)


def carry_miss(cache: CompileSummary, step: PullStep, recorded: dict[str, Any]) -> None:
    """status.cache.notPulled: set by the pass that gives up on the registry, kept by the
    compile's summary while it runs and after (`recorded`: the stored status.cache)."""
    if step.missed is not None:
        cache.not_pulled = step.missed
    elif cache.not_pulled is None and recorded.get("jobName") == cache.job_name:
        cache.not_pulled = recorded.get("notPulled")
