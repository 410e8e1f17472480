"""Play the parts of the cluster that the local control plane lacks (kubelet, Job and
Deployment controllers), through the API, the way they would: a weights or compile pod
that terminates with a termination message, the Job's conditions, a Deployment's status.

Used by `spyre-operator dev --simulate` and by the integration tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from spyre_operator.api.crd import build_cache_crd, build_crd
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.conditions import now_rfc3339
from spyre_operator.render import meta
from spyre_operator.render.pod import CONTAINER_NAMES
from spyre_runtime.contract import SPYRE_SERVING_MODEL_ID, SPYRE_SERVING_MODEL_REVISION, Summary

T = TypeVar("T")


class Timeout(AssertionError):
    """A polled condition did not come true in time."""


def poll_until(
    probe: Callable[[], T | None], what: str, timeout: float, interval: float = 0.2
) -> T:
    """Poll until probe() returns something truthy; fail with what was last seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise Timeout(f"timed out after {timeout:.0f}s waiting until {what}; last: {last!r}")


def ensure_service_account(kube: Kube, namespace: str) -> None:
    """Pods need the namespace's `default` ServiceAccount, which the (absent) service
    account controller would have made."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": namespace},
    }
    try:
        kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    except ApiError as err:
        if not err.conflict:
            raise


def _pod_from_template(
    kube: Kube,
    owner: dict[str, Any],
    name: str,
    extra_labels: dict[str, str],
    node: str | None = None,
) -> dict[str, Any]:
    template = owner["spec"]["template"]
    namespace = owner["metadata"]["namespace"]
    ensure_service_account(kube, namespace)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(template["metadata"].get("labels") or {}) | extra_labels,
        },
        "spec": template["spec"] | ({"nodeName": node} if node else {}),
    }
    return kube.create(pod)


def _container_status(container: str, image: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": state,
    }


def finish_job(
    kube: Kube,
    namespace: str,
    job_name: str,
    *,
    exit_code: int,
    message: str,
    reason: str,
    job_reason: str = "BackoffLimitExceeded",
    retrying: bool = False,
    pod_reason: str = "",
) -> None:
    """A pod of the (compile or weights) Job terminates, then the Job completes (exit code
    0) or fails with `job_reason` (BackoffLimitExceeded or DeadlineExceeded); `retrying`:
    a failed pod, and the Job goes on with another; `pod_reason`: the pod's own, e.g.
    DeadlineExceeded when the kubelet stopped it at its activeDeadlineSeconds."""
    job = kube.get("Job", namespace, job_name)
    if job is None:
        raise LookupError(f"Job {namespace}/{job_name} does not exist")
    attempt = len(kube.list("Pod", namespace, f"job-name={job_name}"))
    labels = {"job-name": job_name, "controller-uid": job["metadata"]["uid"]}
    pod = _pod_from_template(kube, job, f"{job_name}-{attempt}", labels)
    now = now_rfc3339()
    # immutable once set, from 1.3x: a Job finished a second time keeps its first times
    known = job.get("status") or {}
    started = known.get("startTime") or now
    container = job["spec"]["template"]["spec"]["containers"][0]
    terminated = {
        "exitCode": exit_code,
        "reason": reason,
        "message": message,
        "startedAt": now,
        "finishedAt": now,
    }
    pod_status = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": [
            _container_status(container["name"], container["image"], {"terminated": terminated})
        ],
    } | ({"reason": pod_reason} if pod_reason else {})
    kube.patch("Pod", namespace, pod["metadata"]["name"], {"status": pod_status}, sub="status")
    if retrying:
        job_status = {"startTime": started, "active": 1, "failed": attempt + 1}
        kube.patch("Job", namespace, job_name, {"status": job_status}, sub="status")
        return
    # the Job controller's pairs: from 1.31 the API server refuses Complete without
    # SuccessCriteriaMet and Failed without FailureTarget (1.20 takes them as they come)
    if exit_code == 0:
        kinds, detail = ("SuccessCriteriaMet", "Complete"), {}
        counts: dict[str, Any] = {
            "succeeded": 1,
            "completionTime": known.get("completionTime") or now,
        }
    else:
        kinds = ("FailureTarget", "Failed")
        detail = {"reason": job_reason, "message": f"Job failed: {job_reason}"}
        counts = {"failed": attempt + 1}
    stamp = {"status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    conditions = [{"type": kind, **stamp, **detail} for kind in kinds]
    # a finished Job has no active pod (refused from 1.3x; the merge patch keeps a started one)
    job_status = {"conditions": conditions, "startTime": started, "active": 0, **counts}
    kube.patch("Job", namespace, job_name, {"status": job_status}, sub="status")


def start_job_pod(kube: Kube, namespace: str, job_name: str) -> None:
    """A pod of the (compile) Job runs and the Job counts it active. It is bound to a node
    that does not exist (there is no kubelet), so its log cannot be read."""
    job = kube.get("Job", namespace, job_name)
    if job is None:
        raise LookupError(f"Job {namespace}/{job_name} does not exist")
    labels = {"job-name": job_name, "controller-uid": job["metadata"]["uid"]}
    pod = _pod_from_template(kube, job, f"{job_name}-running", labels, node="no-kubelet")
    container = job["spec"]["template"]["spec"]["containers"][0]
    now = now_rfc3339()
    running = {"running": {"startedAt": now}}
    pod_status = {
        "phase": "Running",
        "containerStatuses": [_container_status(container["name"], container["image"], running)],
    }
    kube.patch("Pod", namespace, pod["metadata"]["name"], {"status": pod_status}, sub="status")
    kube.patch(
        "Job",
        namespace,
        job_name,
        {"status": {"startTime": (job.get("status") or {}).get("startTime") or now, "active": 1}},
        sub="status",
    )


def complete_job(
    kube: Kube, namespace: str, job_name: str, seconds: float = 42.0, size: int = 3 * 2**30
) -> None:
    """The compile succeeded; its pod wrote the summary of docs/contract.md."""
    job = kube.get("Job", namespace, job_name)
    key = (job or {}).get("metadata", {}).get("annotations", {}).get(meta.CACHE_KEY_ANNOTATION)
    summary: Summary = {
        "ok": True,
        "cacheKey": key,
        "seconds": seconds,
        "versions": {"vllm": "0.17.1", "vllm_spyre": "1.10.0"},
        "bytes": size,
    }
    finish_job(
        kube, namespace, job_name, exit_code=0, message=json.dumps(summary), reason="Completed"
    )


def complete_weights_job(
    kube: Kube, namespace: str, job_name: str, commit: str, size: int = 2**30
) -> None:
    """The download succeeded: the revision resolved to `commit`."""
    job = kube.get("Job", namespace, job_name)
    env = {} if job is None else env_of(job)
    summary: Summary = {
        "ok": True,
        "id": env.get(SPYRE_SERVING_MODEL_ID, ""),
        "revision": env.get(SPYRE_SERVING_MODEL_REVISION, ""),
        "commit": commit,
        "bytes": size,
        "files": 7,
        "downloaded": True,
        "seconds": 12.5,
    }
    finish_job(
        kube, namespace, job_name, exit_code=0, message=json.dumps(summary), reason="Completed"
    )


def env_of(workload: dict[str, Any]) -> dict[str, str]:
    """The literal env of a workload's (first) container."""
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


def make_deployment_available(kube: Kube, namespace: str, name: str) -> None:
    """Every replica of the current template is up and ready."""
    deploy = kube.get("Deployment", namespace, name)
    if deploy is None:
        raise LookupError(f"Deployment {namespace}/{name} does not exist")
    replicas = int(deploy["spec"].get("replicas", 1))
    now = now_rfc3339()
    status = {
        "observedGeneration": deploy["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "message": "Deployment has minimum availability.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": "ReplicaSet has successfully progressed.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ],
    }
    kube.patch("Deployment", namespace, name, {"status": status}, sub="status")


def fail_deployment_progress(kube: Kube, namespace: str, name: str) -> None:
    """The rollout ran past progressDeadlineSeconds with no replica ready."""
    deploy = kube.get("Deployment", namespace, name)
    if deploy is None:
        raise LookupError(f"Deployment {namespace}/{name} does not exist")
    now = now_rfc3339()
    status = {
        "observedGeneration": deploy["metadata"]["generation"],
        "replicas": int(deploy["spec"].get("replicas", 1)),
        "unavailableReplicas": int(deploy["spec"].get("replicas", 1)),
        "conditions": [
            {
                "type": "Available",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": f'ReplicaSet "{name}" has timed out progressing.',
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ],
    }
    kube.patch("Deployment", namespace, name, {"status": status}, sub="status")


def unschedulable_pod(kube: Kube, kind: str, namespace: str, name: str, message: str) -> str:
    """A pod of the Job or Deployment `name` that the scheduler cannot place (`message`:
    its words, e.g. "0/1 nodes are available: 1 Insufficient ibm.com/spyre_pf."); a Job
    counts it active, as the Job controller does. The pod's name."""
    owner = kube.get(kind, namespace, name)
    if owner is None:
        raise LookupError(f"{kind} {namespace}/{name} does not exist")
    labels = {"job-name": name} if kind == "Job" else {}
    pod = _pod_from_template(kube, owner, f"{name}-pending", labels)
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }
    status = {"phase": "Pending", "conditions": [scheduled]}
    kube.patch("Pod", namespace, pod["metadata"]["name"], {"status": status}, sub="status")
    if kind == "Job":
        kube.patch("Job", namespace, name, {"status": {"active": 1}}, sub="status")
    return str(pod["metadata"]["name"])


def pull_failing_pod(kube: Kube, kind: str, namespace: str, name: str, message: str) -> str:
    """A pod of the Job or Deployment `name` whose image the kubelet cannot pull: its
    container waits in ImagePullBackOff with `message` (the kubelet's words, e.g. the
    registry's 401); a Job counts it active. The pod's name."""
    owner = kube.get(kind, namespace, name)
    if owner is None:
        raise LookupError(f"{kind} {namespace}/{name} does not exist")
    labels = {"job-name": name} if kind == "Job" else {}
    pod = _pod_from_template(kube, owner, f"{name}-pulling", labels)
    container = pod["spec"]["containers"][0]
    waiting = {"reason": "ImagePullBackOff", "message": message}
    statuses = [_container_status(container["name"], container["image"], {"waiting": waiting})]
    status = {"phase": "Pending", "containerStatuses": statuses}
    kube.patch("Pod", namespace, pod["metadata"]["name"], {"status": status}, sub="status")
    if kind == "Job":
        kube.patch("Job", namespace, name, {"status": {"active": 1}}, sub="status")
    return str(pod["metadata"]["name"])


def crash_serving_pod(kube: Kube, namespace: str, name: str, message: str, exit_code: int) -> None:
    """A serving pod whose container exited (e.g. `serve` refusing the cache) and now
    waits in CrashLoopBackOff; its termination message is in lastState."""
    deploy = kube.get("Deployment", namespace, name)
    if deploy is None:
        raise LookupError(f"Deployment {namespace}/{name} does not exist")
    pod = _pod_from_template(kube, deploy, f"{name}-crashing", {})
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    now = now_rfc3339()
    waiting = {
        "reason": "CrashLoopBackOff",
        "message": f"back-off restarting failed container {CONTAINER_NAMES['serve']}",
    }
    terminated = {
        "exitCode": exit_code,
        "reason": "Error",
        "message": message,
        "startedAt": now,
        "finishedAt": now,
    }
    container = _container_status(CONTAINER_NAMES["serve"], image, {"waiting": waiting})
    container |= {"lastState": {"terminated": terminated}, "restartCount": 3}
    status = {"phase": "Running", "containerStatuses": [container]}
    kube.patch("Pod", namespace, pod["metadata"]["name"], {"status": status}, sub="status")


def unrelated_object(
    kind: str, namespace: str, name: str, labels: dict[str, str]
) -> dict[str, Any]:
    """A Pod, Job or PVC that is not the operator's (unless `labels` say it is): what a busy
    cluster has around the SpyreModels (the watches' tests and the scale benchmark)."""
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    container = {"name": "c", "image": "registry.invalid/none:1", "command": ["true"]}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    pod["automountServiceAccountToken"] = False  # no token mounted for a pod nothing runs
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": pod}
    if kind == "Job":
        spec = {"template": {"spec": pod}}
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": metadata, "spec": spec}
    claim = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": claim}


def install_crds(kube: Kube, timeout: float = 90.0) -> None:
    """Server-side apply of the generated CRDs (SpyreModel and SpyreCache); waits until
    they are served."""
    for crd in (build_crd(), build_cache_crd()):
        url = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}"
        kube.request(
            "PATCH",
            url,
            crd,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "spyre-tests", "force": "true"},
        )

        def established(url: str = url) -> bool:
            conditions = kube.request("GET", url).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        poll_until(established, f"the CRD {crd['metadata']['name']} is established", timeout)
