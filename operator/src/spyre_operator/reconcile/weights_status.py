"""A hub model's weights step as status.weights (pure): the weights Job and what its pod
said (docs/contract.md, "The weights Job") -> Downloading, Ready with the commit, or
Failed with the hub's reason."""

from __future__ import annotations

from typing import Any

from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.api.status import WeightsSummary
from spyre_operator.reconcile.conditions import clip, tail
from spyre_operator.reconcile.views import JobView
from spyre_operator.render.weights_job import is_commit, weights_job_name
from spyre_runtime.contract import IMAGE_UNUSABLE, PERMANENT

MESSAGE_LIMIT = 2000


def _retry(job: str) -> str:
    return (
        f" To download again delete the Job (kubectl delete job {job}); adding or changing "
        "spec.model.source.hub.tokenSecret or the revision starts a new one."
    )


def _pod_failure(job: JobView) -> tuple[str, str] | None:
    """(reason, message) of the newest terminated pod that failed."""
    done = job.terminated
    if done is None:
        return None
    unusable = done.fault
    if unusable is not None:
        return IMAGE_UNUSABLE, f"the weights pod {done.pod}: {unusable}"
    summary = done.summary
    if summary is not None and summary.get("ok") is False:
        reason = str(summary.get("reason") or "DownloadFailed")
        return reason, str(summary.get("message") or reason)
    if done.reason == "OOMKilled":
        return "OOMKilled", f"the weights pod {done.pod} ran out of memory (OOMKilled)"
    if done.exit_code != 0:
        lines = tail(done.message, 3) or "(no termination message)"
        return "DownloadFailed", f"the weights pod {done.pod} exited with {done.exit_code}: {lines}"
    return None


def _number(value: object) -> int | float | None:
    """A size, count or duration from the pod's summary, if it is one."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def weights_summary(
    spec: SpyreModelSpec, job: JobView | None, recorded: dict[str, Any]
) -> WeightsSummary | None:
    """status.weights of a hub model (None for the other sources). `recorded` is the
    stored status.weights: a finished Job's outcome is read from its pod once."""
    if not spec.model.from_hub:
        return None
    name, model_id, revision = weights_job_name(spec), spec.model.id, spec.model.hub_revision

    def summary(**fields: Any) -> WeightsSummary:
        return WeightsSummary(job_name=name, model_id=model_id, revision=revision, **fields)

    def failed(reason: str, message: str) -> WeightsSummary:
        text = clip(message.rstrip(".") + "." + _retry(name), MESSAGE_LIMIT)
        return summary(state="Failed", reason=reason, message=text)

    stored = WeightsSummary.model_validate(recorded, extra="ignore")
    same_job = (stored.job_name, stored.model_id, stored.revision) == (name, model_id, revision)
    # While a deleted Job's successor resolves the revision again, the commit it resolved
    # to last stays (what the running Deployment serves; a move is told against it).
    downloading = summary(state="Downloading", commit=stored.commit if same_job else None)
    if job is None:
        return downloading  # the Job is about to be created
    finished = job.succeeded or job.failed
    if finished and same_job and stored.state == ("Ready" if job.succeeded else "Failed"):
        return stored  # the pods may be gone by now; keep what was read from them
    if job.succeeded:
        said = job.terminated.summary if job.terminated else None
        commit = said.get("commit") if said is not None else None
        if said is None or not (isinstance(commit, str) and is_commit(commit)):
            return failed(
                "NoCommit",
                f"Job {name} succeeded but the commit it resolved is not readable from its pod "
                "(the pod is gone or wrote no summary)",
            )
        downloaded = said.get("downloaded")
        return summary(
            state="Ready",
            commit=commit,
            size_bytes=_number(said.get("bytes")),
            files=_number(said.get("files")),
            seconds=_number(said.get("seconds")),
            downloaded=downloaded if isinstance(downloaded, bool) else None,
        )
    failure = _pod_failure(job)
    if job.failed:
        if failure is None:
            reason = job.failed_reason or "DownloadFailed"
            failure = (reason, f"Job {name}: {job.failed_message or reason}")
        return failed(*failure)
    if failure is not None and failure[0] in PERMANENT:
        return failed(*failure)
    return downloading


def pinned_weights(spec: SpyreModelSpec) -> WeightsSummary:
    """status.weights of a key's inventory entry: its revision is the commit the SpyreModel
    that compiled the key downloaded (already on the volume), so it runs no weights Job."""
    return WeightsSummary(
        model_id=spec.model.id,
        revision=spec.model.hub_revision,
        state="Ready",
        commit=spec.model.revision,
    )


def weights_commit(weights: WeightsSummary | dict[str, Any] | None) -> str | None:
    """The commit to compile and serve, once the weights are on the volume (`weights` as
    decided, or the stored status.weights)."""
    if isinstance(weights, dict):
        weights = WeightsSummary.model_validate(weights, extra="ignore")
    if weights is None or weights.state != "Ready":
        return None
    return weights.commit
