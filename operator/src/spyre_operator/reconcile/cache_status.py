"""status.cache and the CacheReady condition (pure): the target key's compile as its Job
shows it (running with its progress, compiled with its summary, failed with why and what
to do), or why it has not started (downloading, queued, the key's clean-up)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spyre_operator.api.status import (
    CACHE_READY,
    CompileProgress,
    CompileSummary,
)
from spyre_operator.api.validation import SpyreModel
from spyre_operator.reconcile.compile_queue import Turn
from spyre_operator.reconcile.conditions import UNSCHEDULABLE, Cond, clip, tail
from spyre_operator.reconcile.inventory import epoch_seconds
from spyre_operator.reconcile.observe import Observed
from spyre_operator.reconcile.pods import PodIssue, Unschedulable
from spyre_operator.reconcile.progress import Reading
from spyre_operator.reconcile.pull import not_used
from spyre_operator.reconcile.views import JobView
from spyre_operator.render import meta
from spyre_operator.render.cachekey import short_key
from spyre_runtime.contract import IMAGE_UNUSABLE, VOLUME_STEP

TAIL_LINES = 5
VOLUME_NOT_ANSWERING = "CacheVolumeNotAnswering"


PROGRESS_DETAIL_LIMIT = 300  # the warmup step's detail holds the whole vllm command line


_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


@dataclass(frozen=True)
class Failure:
    reason: str
    message: str


def compile_failure(job: JobView) -> Failure:
    """Why the compile Job failed, and what to do about it."""
    retry = (
        f" To retry the same configuration delete the Job (kubectl delete job {job.name}); "
        "a spec change that changes the cache key starts a new compile."
    )
    done = job.terminated
    summary = done.summary if done else None
    unusable = done.fault if done else None
    if done is not None and unusable is not None:
        return Failure(IMAGE_UNUSABLE, f"the compile pod {done.pod}: {unusable}." + retry)
    stopped = job.deadline_exceeded
    if stopped is not None:
        return Failure(
            "DeadlineExceeded",
            f"the compile pod {stopped.pod} ran longer than its activeDeadlineSeconds "
            f"({stopped.seconds}s from its start on a node; the wait for a node is not "
            "counted): raise spec.cache.compile.activeDeadlineSeconds." + retry,
        )
    if done is not None and done.reason == "OOMKilled":
        return Failure(
            "OOMKilled",
            f"the compile pod {done.pod} ran out of memory (OOMKilled, exit code "
            f"{done.exit_code}): raise spec.cache.compile.resources.limits.memory." + retry,
        )
    if job.failed_reason == "DeadlineExceeded":
        return Failure(
            "DeadlineExceeded",
            f"Job {job.name} ran longer than its activeDeadlineSeconds "
            f"({job.active_deadline_seconds}s): raise spec.cache.compile.activeDeadlineSeconds."
            + retry,
        )
    if summary is not None and summary.get("ok") is False:
        reason = str(summary.get("reason") or "CompileFailed")
        reason = reason if _REASON.match(reason) else "CompileFailed"
        return Failure(reason, f"{summary.get('message', '')}".strip() + "." + retry)
    if done is not None:
        lines = tail(done.message, TAIL_LINES) or "(no termination message)"
        return Failure(
            "CompileFailed",
            f"the compile pod {done.pod} exited with code {done.exit_code} ({done.reason}): "
            f"{lines}." + retry,
        )
    detail = job.failed_message or job.failed_reason or "failed"
    return Failure("CompileFailed", f"Job {job.name}: {detail}." + retry)


def compile_progress(reading: Reading | None) -> CompileProgress | None:
    if reading is None:
        return None
    step = reading.step
    return CompileProgress(
        step=step.name,
        elapsed_seconds=step.elapsed,
        detail=clip(step.detail, PROGRESS_DETAIL_LIMIT) or None,
        pod=reading.pod,
    )


def duration(seconds: float) -> str:
    """4m12s, 1h05m, 42s."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def pending_seconds(job: JobView, now: str) -> float | None:
    """How long the Job's pods waited for a node to start them: each from its creation to
    its start (the kubelet's startTime), or to `now` (the Job's end once it finished)
    while it still waits; None when none waited (or its pods were not read)."""
    waited = 0.0
    for pod in job.starts:
        if not pod.created:
            continue
        if pod.started is not None:
            waited += epoch_seconds(pod.started) - epoch_seconds(pod.created)
        elif pod.pending:
            waited += epoch_seconds(job.finished_at or now) - epoch_seconds(pod.created)
    return round(waited, 1) if waited > 0 else None


def cache_summary(
    key: str,
    job: JobView | None,
    recorded: dict[str, Any],
    now: str,
    progress: Reading | None = None,
) -> CompileSummary:
    """status.cache for the target key: the Job's termination summary once it finished,
    its progress while it runs, and the time its pods waited for a node. `recorded` is
    the stored status.cache."""
    stored = CompileSummary.model_validate(recorded, extra="ignore")
    if job is None:
        if stored.cache_key == key and stored.ok:
            return stored  # compiled earlier; the Job was deleted since
        return CompileSummary(job_name=meta.compile_job_name(key), cache_key=key)
    # A pod deleted since (by hand) takes its wait along: what was read before stays.
    before = stored.pending_seconds if stored.job_name == job.name else None
    waited = max((w for w in (pending_seconds(job, now), before) if w is not None), default=None)
    if not (job.succeeded or job.failed):
        return CompileSummary(
            job_name=job.name,
            cache_key=key,
            progress=compile_progress(progress),
            pending_seconds=waited,
        )
    if stored.job_name == job.name and stored.ok is job.succeeded:
        return stored  # the pods may be gone by now; keep what was read from them
    if job.succeeded:
        said = (job.terminated.summary if job.terminated else None) or {"ok": True}
        published: dict[str, Any] = dict(said.get("published") or {})
        return CompileSummary(
            job_name=job.name,
            cache_key=key,
            ok=True,
            seconds=said.get("seconds"),
            versions=said.get("versions"),
            bytes=said.get("bytes"),
            published_to=published.get("reference"),
            bytes_moved=published.get("bytes"),
            pending_seconds=waited,
        )
    failure = compile_failure(job)
    return CompileSummary(
        job_name=job.name,
        cache_key=key,
        ok=False,
        reason=failure.reason,
        message=clip(failure.message, 2000),
        pending_seconds=waited,
    )


def cache_condition(
    model: SpyreModel,
    obs: Observed,
    key: str | None,
    cache: CompileSummary | None,
    cache_ready: bool,
    failure: Failure | None,
    queued: Turn | None,
    cleaning: str | None = None,
) -> Cond:
    """CacheReady: compiled, failed, or on its way (downloading, queued, compiling, or
    waiting for the key's clean-up to finish before compiling it again); or the download's
    or compile's pod no node takes (reason Unschedulable, the scheduler's words), or whose
    container cannot start (the kubelet's reason, e.g. ImagePullBackOff, and words)."""
    spec = model.spec
    weights = obs.weights
    waiting, stuck = waiting_pod(obs, key), stuck_pod(obs, key)
    unused = not_used(cache.not_pulled if cache is not None else None)
    if cache_ready:
        assert key is not None and cache is not None
        took = f" in {cache.seconds:.0f}s" if cache.seconds is not None else ""
        how = f"pulled from {cache.pulled_from}" if cache.pulled_from else "compiled"
        cache_cond = Cond(
            CACHE_READY,
            "True",
            "Pulled" if cache.pulled_from else "Compiled",
            f"cache {short_key(key)} {how} by Job {cache.job_name}{took}{waited(cache)}",
        )
    elif failure is not None:
        cache_cond = Cond(CACHE_READY, "False", failure.reason, failure.message)
    elif stuck is not None:
        what = "download" if key is None else f"compile of cache {short_key(key)}"
        cache_cond = Cond(CACHE_READY, "False", stuck.reason, f"the {what} {cannot_start(stuck)}")
    elif waiting is not None:
        what = "download" if key is None else f"compile of cache {short_key(key)} {NOT_COUNTED}"
        cache_cond = Cond(CACHE_READY, "False", UNSCHEDULABLE, f"the {what} {waits(waiting)}")
    elif key is None:
        job = weights.job_name if weights else None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "Downloading",
            f"Job {job} is downloading {spec.model.id} at revision "
            f"{spec.model.hub_revision} into the cache volume; the compile follows",
        )
    elif cleaning is not None:
        assert key is not None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "CleaningUp",
            f"Job {cleaning} is removing the unused cache {short_key(key)} from the volume; "
            "it is compiled again once that finished",
        )
    elif cache is not None and key is not None and cache.job_name == meta.pull_job_name(key):
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "Pulling",
            f"Job {cache.job_name} is pulling cache {short_key(key)} from the cache registry; "
            "it is compiled if the registry has no usable copy",
        )
    elif queued is not None:
        assert key is not None
        cache_cond = Cond(
            CACHE_READY,
            "False",
            "Queued",
            f"the compile of cache {short_key(key)} waits for a free slot: {queued.message}"
            + unused,
        )
    else:
        assert key is not None
        progress = cache.progress if cache is not None else None
        # the pod's I/O waits on a network filesystem whose server is gone (volumewatch.py)
        unanswered = progress is not None and progress.step == VOLUME_STEP
        claim = f"its cache volume (claim {spec.cache.volume.claim_name}) does not answer"
        cache_cond = Cond(
            CACHE_READY,
            "False",
            VOLUME_NOT_ANSWERING if unanswered else "Compiling",
            f"Job {meta.compile_job_name(key)} is compiling cache {short_key(key)}"
            + (f": {claim}" if unanswered else "")
            + (f": {progress_message(progress)}" if progress is not None else "")
            + (waited(cache) if cache is not None else "")
            + unused,
        )
    return cache_cond


NOT_COUNTED = "(its activeDeadlineSeconds counts from its start on a node)"


def waited(cache: CompileSummary) -> str:
    """`, with 4m10s waiting for a node`, when the compile's pods waited a minute or more
    (less is how long a scheduler and a kubelet take anyway)."""
    seconds = cache.pending_seconds
    if seconds is None or seconds < 60:
        return ""
    return f", with {duration(seconds)} waiting for a node"


def waits(pod: Unschedulable) -> str:
    """... waits for a node since T: pod P: <the scheduler's words>"""
    since = f" since {pod.since}" if pod.since else ""
    return f"waits for a node{since}: pod {pod.pod}: {pod.message or 'unschedulable'}"


def _running_job(obs: Observed, key: str | None) -> JobView | None:
    """The running download (no key yet) or compile."""
    job = obs.weights_job if key is None else obs.job
    return None if job is None or job.succeeded or job.failed else job


def waiting_pod(obs: Observed, key: str | None) -> Unschedulable | None:
    """The running download's (no key yet) or compile's pod that no node takes."""
    job = _running_job(obs, key)
    return job.unschedulable if job else None


def cannot_start(pod: PodIssue) -> str:
    """... cannot start: pod P: ImagePullBackOff: <the kubelet's words>"""
    said = f": {pod.message}" if pod.message else ""
    return f"cannot start: pod {pod.pod}: {pod.reason}{said}"


def stuck_pod(obs: Observed, key: str | None) -> PodIssue | None:
    """The running download's (no key yet) or compile's pod whose container cannot start."""
    job = _running_job(obs, key)
    return job.stuck if job else None


def image_failure(obs: Observed, key: str | None) -> Failure | None:
    """That pod's image cannot run (image_fault.py): a failure that needs a person, not
    a wait; gone again once the pod starts (the image pushed, the name corrected)."""
    stuck = stuck_pod(obs, key)
    unusable = stuck.fault if stuck is not None else None
    if stuck is None or unusable is None:
        return None
    what = "download" if key is None else f"compile of cache {short_key(key)}"
    return Failure(IMAGE_UNUSABLE, f"the {what} cannot start: pod {stuck.pod}: {unusable}")


def progress_message(progress: CompileProgress) -> str:
    """step engine at 4m12s (still running: [WARMUP] (2/3) ...)"""
    detail = f" ({progress.detail})" if progress.detail else ""
    return f"step {progress.step} at {duration(progress.elapsed_seconds)}{detail}"
