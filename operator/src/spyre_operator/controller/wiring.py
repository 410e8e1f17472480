"""What connects kopf to the reconcilers: settings, the work queue and its workers, a
controller per kind (kinds.py: its reconciler and the echoes of its status writes), the
children's watches, Events, the resync and metrics (the triggers are in triggers.py, the
indexes in indexes.py, the watches in kube/watches.py).

The settings come from settings.py: `run`'s flags, or the environment with
`kopf run -m spyre_operator.handlers`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import kopf

from spyre_operator.api.names import CACHE_KIND, KIND
from spyre_operator.controller import allocator, metrics, metrics_server, triggers
from spyre_operator.controller.echoes import Echoes
from spyre_operator.controller.events import EventPoster
from spyre_operator.controller.failures import complain
from spyre_operator.controller.indexes import CACHES, MODELS, read_compile_queue, stored
from spyre_operator.controller.kinds import Controller
from spyre_operator.controller.triggers import Resync, watched_count
from spyre_operator.controller.workqueue import Key, WorkQueue
from spyre_operator.kube.client import (
    KINDS,
    REQUEST_TIMEOUT,
    Kube,
    load_api_client,
    policy_version,
)
from spyre_operator.kube.indexed import IndexedKube
from spyre_operator.kube.watches import Source, Store, Watches
from spyre_operator.reconcile import compile_queue
from spyre_operator.reconcile.dryrun import PARALLEL
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.reconcile.observe import Cards
from spyre_operator.reconcile.progress import ProgressReader
from spyre_operator.reconcile.result import Result
from spyre_operator.reconcile.shared import Shared
from spyre_operator.reconcile.starts import StartReader
from spyre_operator.render import meta
from spyre_operator.settings import Settings

CHILDREN = ("Job", "Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget")


def configure(
    config: Settings, settings: kopf.OperatorSettings, memo: kopf.Memo, indexes: Mapping[str, Any]
) -> None:
    """No kopf-posted Events, one client for every reconcile (reading the children from the
    watches' stores), the reconciles run by the work queue's `--workers` threads (kopf's
    handlers and the watches only queue them), Events posted from a thread of their own,
    and the periodic resync. Returns once the stores hold their first listing, and the
    workers start only then: kopf starts watching SpyreModels after the start-up handlers,
    so no reconcile sees an empty store and creates a child that exists."""
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.enabled = False  # the reconciler posts its Events itself (EventPoster)
    settings.peering.standalone = True  # one replica (Recreate); no peering CRDs needed
    workers = config.workers
    settings.execution.max_workers = workers
    # Each worker's requests (its dry runs in parallel), the Events thread, the resync and
    # the progress reader: a pool too small discards connections (a TLS handshake each,
    # and a WARNING) in every burst of creates.
    api = load_api_client(config.kubeconfig, pool_size=workers * PARALLEL + 4)
    policy = policy_version(Kube(api))  # the PodDisruptionBudgets' group version
    stores = {  # a user's cache claim is not labelled: not every PVC is in the store
        plural: Store(plural, complete=plural != "persistentvolumeclaims")
        for plural in (KINDS[kind][1] for kind in (*CHILDREN, "PersistentVolumeClaim"))
    }
    # The pods are selected by their model (serving) or their Job (compile, weights).
    stores["pods"] = Store("pods", by=(meta.MODEL_LABEL, meta.JOB_NAME_LABEL))
    stores["nodes"] = Store("nodes")  # every node: the cards they have (spec.autoscaling)
    kube = IndexedKube(api, stores, policy)
    memo.events = EventPoster(kube)
    limits = compile_queue.Limits(*config.compile_limits)
    wants = (indexes[MODELS], indexes[CACHES])
    queue = functools.partial(read_compile_queue, limits, stores["jobs"], wants)
    unlimited = limits == compile_queue.Limits()  # no queue to read, no lock to take

    def reconcile(key: Key) -> Result:
        return memo.controllers[key[0]].reconcile(key[1], key[2])

    def seen(key: Key, version: str) -> None:
        memo.controllers[key[0]].listed(key[1], key[2], version)

    memo.queue = WorkQueue(reconcile, complain)
    told = metrics.Metrics()
    interval = config.progress_seconds
    # Both kinds' reconcilers share the compile starts (the queue's limits hold for both),
    # the kinds found unserved (both make inventory entries: one WARNING if SpyreCaches
    # are not), a running compile's progress and each serving pod's start-up (read once).
    shared = Shared(
        compile_queue=None if unlimited else queue,
        progress=ProgressReader(kube, interval) if interval else None,
        start_reports=StartReader(kube),
        statuses=told,
        busy=lambda: not memo.queue.idle(),
        cards=functools.partial(cards_seen, memo, stores),
    )
    watched = {KIND: indexes[MODELS], CACHE_KIND: indexes[CACHES]}
    memo.controllers = {}
    for kind in (KIND, CACHE_KIND):
        echoes = Echoes(functools.partial(stored, watched[kind]))
        reconciler = Reconciler(kube, memo.events, kind, echoes, config, shared)
        memo.controllers[kind] = Controller(reconciler, memo.queue, echoes, told)
    memo.watches = start_watches(config, memo.controllers, stores, policy)
    memo.resync = Resync(
        kube,
        memo.queue,
        functools.partial(watched_count, watched),
        config.resync_seconds,
        namespaces=list(config.namespaces),
        after_pass=allocator.trim,  # a pass's pages of bodies, and a burst's, freed
        seen=seen,
    )
    port = config.metrics_port
    if port:
        metrics_server.serve(
            lambda: metrics_lines(
                memo.controllers.values(), told, memo.queue, memo.watches, memo.resync
            ),
            port,
        )
    memo.watches.wait_synced()
    memo.queue.start(workers)
    memo.resync.start()


def cards_seen(memo: kopf.Memo, stores: Mapping[str, Store]) -> Cards | None:
    """The nodes and the operator's pods, once the nodes are listed (None before: the
    capacity of spec.autoscaling is not known yet)."""
    if "watches" not in memo or not memo.watches.synced("Node"):
        return None
    return stores["nodes"].values(), stores["pods"].values()


def start_watches(
    config: Settings,
    controllers: triggers.Controllers,
    stores: Mapping[str, Store],
    policy: str = "policy/v1",
) -> Watches:
    """The children's and pods' watches; their events only queue reconciles (the
    triggers), so a slow reconcile never holds a watch. `policy`: the group version of
    the PodDisruptionBudgets (client.policy_version)."""

    def handle(trigger: Any) -> Any:
        return lambda event_type, body: trigger(controllers, event_type, body)

    sources = [
        Source(kind, stores[KINDS[kind][1]], handle(triggers.child_changed)) for kind in CHILDREN
    ]
    sources += [
        Source("PersistentVolumeClaim", stores["persistentvolumeclaims"], None),
        Source("Pod", stores["pods"], handle(triggers.pod_changed)),
        Source("Node", stores["nodes"], None, selector=None, cluster=True, awaited=False),
    ]
    namespaces = list(config.namespaces)
    # Their own connections: a watch holds one for minutes.
    size = len(sources) * max(1, len(namespaces))
    watches = Watches(Kube(load_api_client(config.kubeconfig, size), policy), sources, namespaces)
    watches.start()
    return watches


def shutdown(memo: kopf.Memo) -> None:
    if "watches" in memo:  # not if the start-up failed before them
        memo.watches.close()
    if "resync" in memo:  # not if it stopped while the watches listed
        memo.resync.stop()
    if "queue" in memo:
        memo.queue.shutdown(timeout=REQUEST_TIMEOUT)
    memo.events.close()


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the whole body) on every watch event, for
    create/update handlers; the operator has none (handlers.py), so that copy of every
    Job, Pod and Deployment event is skipped."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return {}

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Nothing to remember."""


def metrics_lines(
    controllers: Iterable[Controller],
    told: metrics.Metrics,
    queue: WorkQueue,
    watches: Watches,
    resync: Resync,
) -> Iterator[str]:
    """The loop's and both reconcilers' counters added up (their client and Metrics are
    shared), the exposition's lines."""
    reconcilers = [c.reconciler for c in controllers]
    stats = sum((r.stats for r in reconcilers), queue.stats.copy())
    stats["resync_passes"] = resync.passes
    kube = reconcilers[0].kube
    return metrics.exposition(
        stats,
        told,
        kube.writes,
        kube.dry_runs,
        kube.reads,
        watches.counts(),
        resync.last_pass,
        queue.loop_stats(),
    )
