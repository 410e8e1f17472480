"""Read the cluster state of one SpyreModel into plain, immutable views.

`observe` reads the children (a handful of GETs and a list of the serving pods while they
are not all ready, which the operator's client answers from its stores:
indexed.IndexedKube; a LIST of a Job's pods once it finished without a recorded summary)
and, while the compile runs,
the end of its pod's log once per progress interval (progress.py); views.py turns the raw
objects into the facts `decide` works from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.spec import SpyreModelSpec
from spyre_operator.api.status import WeightsSummary
from spyre_operator.api.validation import SpyreModel
from spyre_operator.kube.client import ApiError, Kube
from spyre_operator.reconcile.compile_queue import Queue
from spyre_operator.reconcile.pods import (
    PodIssue,
    Unschedulable,
    pod_issues,
    unschedulable,
)
from spyre_operator.reconcile.progress import ProgressReader, Reading
from spyre_operator.reconcile.routes import Router, read_router
from spyre_operator.reconcile.starts import Start, StartReader
from spyre_operator.reconcile.views import DeploymentView, JobView, deployment_view, job_view
from spyre_operator.reconcile.weights_status import pinned_weights, weights_commit, weights_summary
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.pod import CONTAINER_NAMES
from spyre_operator.render.weights_job import weights_job_name


def object_ref(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a manifest."""
    meta = obj["metadata"]
    return obj["kind"], meta["namespace"], meta["name"]


@dataclass(frozen=True)
class Later:
    """What decides the deferred actions (the key's inventory entry) of a pass: read once
    a first decision has some (engine.Reconciler.plan)."""

    busy: bool  # a reconcile a trigger asked for waits: the deferred ones wait behind it
    unserved: frozenset[str]  # kinds the API server was found not to serve lately
    exist: frozenset[tuple[str, str, str]]  # (kind, namespace, name) of those made already


@dataclass(frozen=True)
class Autoscaler:
    """With spec.autoscaling (or one made before): does the API server serve KEDA's
    ScaledObjects, and this model's as it is (None: none)."""

    served: bool
    live: dict[str, Any] | None


Cards = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # the nodes, the operator's pods


@dataclass(frozen=True)
class Observed:
    """Everything decide() needs about one SpyreModel and its children."""

    body: dict[str, Any]
    key: str | None = None  # the spec's cache key, once the weights' commit is known
    pvc_exists: bool | None = None  # None: not checked (the spec does not create one)
    weights_job: JobView | None = None  # a hub model's weights Job
    weights: WeightsSummary | None = None  # status.weights as it stands now (hub models)
    job: JobView | None = None  # the compile Job of the spec's cache key
    pull_job: JobView | None = None  # with a cache registry, while that Job does not exist
    progress: Reading | None = None  # while that Job runs: its pod's newest step
    progress_seconds: float | None = None  # while it runs: when to read the progress again
    queue: Queue | None = None  # the compile queue, read when that Job does not exist
    inventory: bool = False  # a SpyreCache the operator made as a key's inventory entry
    cleanup_job: JobView | None = None  # an inventory entry's clean-up Job
    deployment: DeploymentView | None = None
    service: dict[str, Any] | None = None
    network_policy: dict[str, Any] | None = None
    disruption_budget: dict[str, Any] | None = None
    pod_issues: tuple[PodIssue, ...] = field(default_factory=tuple)
    unschedulable: tuple[Unschedulable, ...] = ()  # serving pods no node takes
    starts: tuple[Start, ...] = ()  # the ready serving pods' start-ups (compile reports)
    autoscaler: Autoscaler | None = None  # read with spec.autoscaling, or one made before
    cards: Cards | None = None  # with spec.autoscaling: what capacity.py counts
    router: Router | None = None  # read with spec.routing, or objects made before
    # Read when a first decision asks (it starts a Job, it has deferred actions), for the
    # same decide again: the API server's answer to a dry run of the other children
    # (dryrun.py; None: all taken, or not asked), and what decides the deferred actions.
    refusal: str | None = None
    later: Later | None = None

    @property
    def uid(self) -> str:
        uid: str = self.body["metadata"]["uid"]
        return uid

    def children(self, claim: str) -> set[tuple[str, str]]:
        """(kind, name) of the children that exist (a dry run of them would answer 409);
        `claim`: the cache volume's name."""
        found = {("Job", job.name) for job in (self.weights_job, self.job) if job is not None}
        if self.pvc_exists:
            found.add(("PersistentVolumeClaim", claim))
        for kind, child in (
            ("Deployment", self.deployment.live if self.deployment else None),
            ("Service", self.service),
            ("NetworkPolicy", self.network_policy),
            ("PodDisruptionBudget", self.disruption_budget),
        ):
            if child is not None:
                found.add((kind, child["metadata"]["name"]))
        return found

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation", 1))

    @property
    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self.body.get("status") or {}
        return status


def _needs_compile_pods(job: dict[str, Any], status: dict[str, Any]) -> bool:
    """Read the Job's pods only when it finished and its outcome is not recorded yet."""
    view = job_view(job, [])
    if not (view.succeeded or view.failed):
        return False
    recorded = status.get("cache") or {}
    return recorded.get("jobName") != view.name or recorded.get("ok") is not view.succeeded


def _finished(job: dict[str, Any]) -> bool:
    """The clean-up Job's pods are read once it finished (its summary: the bytes freed)."""
    view = job_view(job, [])
    return view.succeeded or view.failed


def _needs_weights_pods(job: dict[str, Any], status: dict[str, Any]) -> bool:
    """Read the weights Job's pods when it finished and its outcome is not recorded yet,
    or when a pod failed (a refusal by the hub is shown while the Job retries)."""
    view = job_view(job, [])
    recorded = status.get("weights") or {}
    if view.succeeded or view.failed:
        outcome = "Ready" if view.succeeded else "Failed"
        return recorded.get("jobName") != view.name or recorded.get("state") != outcome
    return view.failures > 0 and recorded.get("state") != "Failed"


def _job(
    kube: Kube,
    ns: str,
    name: str,
    container: str,
    needs_pods: Callable[[dict[str, Any]], bool],
) -> JobView | None:
    raw = kube.get("Job", ns, name)
    if raw is None:
        return None
    # A finished Job's pods, once: from the API server, which has the pod's end before
    # the Job's (the pods' watch may bring it after the Job's does). A running Job's
    # from the pods' store: is one waiting for a node?
    selector = f"{meta.JOB_NAME_LABEL}={name}"
    view = job_view(raw, [])
    if needs_pods(raw):
        pods = kube.list("Pod", ns, selector, consistent=True)
    elif view.active and not (view.succeeded or view.failed):
        pods = kube.list("Pod", ns, selector)
    else:
        return view
    return job_view(raw, pods, container)


def read_starts(
    reader: StartReader, model: tuple[str, str], pods: list[dict[str, Any]]
) -> tuple[Start, ...]:
    """The start-ups of the model's ready serving pods (each pod's log read once)."""
    found, ready = [], set()
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if not any(c.get("name") == CONTAINER_NAMES["serve"] and c.get("ready") for c in statuses):
            continue
        key = (pod["metadata"]["name"], pod["metadata"].get("creationTimestamp", ""))
        ready.add(key)
        start = reader(model, key)
        if start is not None:
            found.append(start)
    reader.forget(model, ready)
    return tuple(found)


def spec_key(spec: SpyreModelSpec, commit: str | None) -> str | None:
    """The spec's cache key (computed once per reconcile: decide reads Observed.key);
    None while a hub model's revision is not resolved to a commit."""
    return cache_key(spec, commit) if commit is not None or not spec.model.from_hub else None


def read_autoscaler(kube: Kube, namespace: str, name: str) -> Autoscaler:
    """The model's ScaledObject, or that KEDA is not installed (404 without details)."""
    try:
        return Autoscaler(True, kube.request("GET", kube.path("ScaledObject", namespace, name)))
    except ApiError as err:
        if not err.not_found:
            raise
        return Autoscaler(not err.kind_unserved, None)


def observe(
    kube: Kube,
    body: dict[str, Any],
    model: SpyreModel,
    compile_queue: Callable[[], Queue | None] | None = None,
    progress: ProgressReader | None = None,
    starts: StartReader | None = None,
    pulls: bool = False,
    key: str | None = None,
    cards: Callable[[], Cards | None] | None = None,
) -> Observed:
    """`compile_queue` reads the compile queue (None: no limits); `progress` a running
    compile's progress (None: not read); `starts` the ready serving pods' start-up
    reports (None: not read); `pulls`: a cache registry is configured (the key's pull Job
    is read while its compile Job does not exist); `key`: the spec's cache key, when this
    reconcile computed it already (once per reconcile: a second plan under the compile
    lock reads the same body); `cards`: the nodes and the operator's pods, for
    spec.autoscaling (None: not read)."""
    ns, spec = model.namespace, model.spec
    status = body.get("status") or {}
    pvc_exists = None
    if spec.cache.volume.create:
        pvc_exists = kube.get("PersistentVolumeClaim", ns, spec.cache.volume.claim_name) is not None
    weights_job, weights, job, commit, queue, cleanup_job = None, None, None, None, None, None
    pull_job = None
    reading, progress_seconds = None, None
    inventory = model.kind == CACHE_KIND and meta.is_inventory(body)
    if inventory and spec.model.from_hub:  # pinned to the commit its SpyreModel downloaded
        weights = pinned_weights(spec)
        commit = weights_commit(weights)
    elif spec.model.from_hub:
        weights_job = _job(
            kube,
            ns,
            weights_job_name(spec),
            CONTAINER_NAMES["weights"],
            lambda raw: _needs_weights_pods(raw, status),
        )
        weights = weights_summary(spec, weights_job, status.get("weights") or {})
        commit = weights_commit(weights)
    key = key or spec_key(spec, commit)
    if key is not None:
        job = _job(
            kube,
            ns,
            meta.compile_job_name(key),
            CONTAINER_NAMES["precompile"],
            lambda raw: _needs_compile_pods(raw, status),
        )
        if job is None and compile_queue is not None:
            queue = compile_queue()
        if job is None and pulls:
            pull_job = _job(
                kube,
                ns,
                meta.pull_job_name(key),
                CONTAINER_NAMES["pull"],
                lambda raw: _needs_compile_pods(raw, status),
            )
        running = job is not None and job.active and not (job.succeeded or job.failed)
        if job is not None and running and progress is not None:
            reading, progress_seconds = progress(ns, job.name), progress.interval
        if inventory:
            name = meta.cleanup_job_name(key)
            cleanup_job = _job(kube, ns, name, CONTAINER_NAMES["clean"], _finished)
    deployment = service = network_policy = budget = None
    issues: tuple[PodIssue, ...] = ()
    waiting: tuple[Unschedulable, ...] = ()
    started: tuple[Start, ...] = ()
    if model.serves:  # a SpyreCache only compiles
        raw_deploy = kube.get("Deployment", ns, model.name)
        if raw_deploy is not None:
            deployment = deployment_view(raw_deploy)
            pods = kube.list("Pod", ns, meta.selector_string(model.name))
            if deployment.ready_replicas < deployment.spec_replicas:
                issues, waiting = pod_issues(pods), unschedulable(pods)
            if starts is not None:
                started = read_starts(starts, (ns, model.name), pods)
        service = kube.get("Service", ns, model.name)
        network_policy = kube.get("NetworkPolicy", ns, model.name)
        budget = kube.get("PodDisruptionBudget", ns, model.name)
    autoscaler, seen = None, None
    if model.serves and (spec.autoscaling is not None or status.get("autoscaling")):
        autoscaler = read_autoscaler(kube, ns, model.name)
        seen = cards() if cards is not None and spec.autoscaling is not None else None
    router = None
    if model.serves and (spec.routing is not None or status.get("routing")):
        gateway = spec.routing.gateway if spec.routing else None
        routed = bool((status.get("routing") or {}).get("httpRoute"))
        router = read_router(kube, ns, model.name, gateway, routed)
    return Observed(
        body=body,
        key=key,
        pvc_exists=pvc_exists,
        weights_job=weights_job,
        weights=weights,
        job=job,
        pull_job=pull_job,
        progress=reading,
        progress_seconds=progress_seconds,
        queue=queue,
        inventory=inventory,
        cleanup_job=cleanup_job,
        deployment=deployment,
        service=service,
        network_policy=network_policy,
        disruption_budget=budget,
        pod_issues=issues,
        unschedulable=waiting,
        starts=started,
        autoscaler=autoscaler,
        cards=seen,
        router=router,
    )
