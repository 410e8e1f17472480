"""A hub model's weights step as status.weights (pure): the weights Job and what its pod
said (docs/contract.md, "The weights Job") -> Downloading, Ready with the commit, or
Failed with the hub's reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.reconcile.conditions import clip, tail
from spyre_operator.render.weights import is_commit, weights_job_name
from spyre_runtime.contract import PERMANENT

if TYPE_CHECKING:  # observe imports this module
    from spyre_operator.reconcile.observe import JobView

MESSAGE_LIMIT = 2000


def _retry(job: str) -> str:
    return (
        f" To download again delete the Job (kubectl delete job {job}); adding or changing "
        "spec.model.source.hub.tokenSecret or the revision starts a new one."
    )


def _failed(base: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    text = clip(message.rstrip(".") + "." + _retry(base["jobName"]), MESSAGE_LIMIT)
    return base | {"state": "Failed", "reason": reason, "message": text}


def _pod_failure(job: JobView) -> tuple[str, str] | None:
    """(reason, message) of the newest terminated pod that failed."""
    done = job.terminated
    if done is None:
        return None
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


def weights_summary(
    spec: SpyreModelSpec, job: JobView | None, recorded: dict[str, Any]
) -> dict[str, Any] | None:
    """status.weights of a hub model (None for the other sources). `recorded` is the
    stored status.weights: a finished Job's outcome is read from its pod once."""
    if not spec.model.from_hub:
        return None
    name = weights_job_name(spec)
    base = {"jobName": name, "modelId": spec.model.id, "revision": spec.model.hub_revision}
    same_job = all(recorded.get(k) == v for k, v in base.items())
    # While a deleted Job's successor resolves the revision again, the commit it resolved
    # to last stays (what the running Deployment serves; a move is told against it).
    downloading = base | {"state": "Downloading"}
    if same_job and isinstance(recorded.get("commit"), str):
        downloading["commit"] = recorded["commit"]
    if job is None:
        return downloading  # the Job is about to be created
    finished = job.succeeded or job.failed
    if finished and same_job and recorded.get("state") == ("Ready" if job.succeeded else "Failed"):
        return recorded  # the pods may be gone by now; keep what was read from them
    if job.succeeded:
        summary = job.terminated.summary if job.terminated else None
        commit = summary.get("commit") if summary is not None else None
        if summary is None or not (isinstance(commit, str) and is_commit(commit)):
            return _failed(
                base,
                "NoCommit",
                f"Job {name} succeeded but the commit it resolved is not readable from its pod "
                "(the pod is gone or wrote no summary)",
            )
        out: dict[str, Any] = base | {"state": "Ready", "commit": commit}
        found = {
            "sizeBytes": summary.get("bytes"),
            "files": summary.get("files"),
            "seconds": summary.get("seconds"),
        }
        out |= {
            k: v for k, v in found.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        downloaded = summary.get("downloaded")
        if isinstance(downloaded, bool):
            out["downloaded"] = downloaded
        return out
    failure = _pod_failure(job)
    if job.failed:
        if failure is None:
            reason = job.failed_reason or "DownloadFailed"
            failure = (reason, f"Job {name}: {job.failed_message or reason}")
        return _failed(base, *failure)
    if failure is not None and failure[0] in PERMANENT:
        return _failed(base, *failure)
    return downloading


def weights_commit(weights: dict[str, Any] | None) -> str | None:
    """The commit to compile and serve, once the weights are on the volume."""
    if weights is None or weights.get("state") != "Ready":
        return None
    commit: str = weights["commit"]
    return commit
