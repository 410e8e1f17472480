"""The operator's Prometheus metrics: what the loop and the reconcilers count, in the text
exposition format (with # HELP and # TYPE, so `promtool check metrics` passes and
Prometheus knows counters from gauges); metrics_server.py serves it on /metrics."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from spyre_operator import __version__
from spyre_operator.api.names import KIND
from spyre_operator.api.status import CACHE_READY, READY
from spyre_operator.controller.cache_keys import CacheKeys
from spyre_operator.controller.histogram import Histogram
from spyre_operator.controller.workqueue import RECONCILE_BUCKETS, LoopStats
from spyre_operator.reconcile.conditions import UNSCHEDULABLE

log = logging.getLogger(__name__)

PREFIX = "spyre_operator"
# A compile takes minutes to hours.
COMPILE_BUCKETS = (60.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 10800.0)
# A pull moves GBs from a registry: seconds to minutes.
PULL_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
Key = tuple[str, str]


class Metrics:
    """What the statuses the reconcilers decide say (one for both kinds); every method is
    safe from any thread. The phases are the SpyreModels' (`kind`); a SpyreCache's compile
    time counts too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.compile = Histogram(COMPILE_BUCKETS)
        self.pull = Histogram(PULL_BUCKETS)
        self.pulls: Counter[str] = Counter()  # hit, miss (a key compiled with a registry)
        self.phases: dict[Key, str] = {}
        self.unschedulable: dict[tuple[str, str, str], str] = {}  # (kind, ns, name) -> role
        self.from_cache: dict[Key, tuple[int, int]] = {}  # (ready, started from the cache)
        self._compiles_seen: set[str] = set()  # Job names whose duration was observed
        self.cache_keys = CacheKeys()
        self._pulls_seen: set[tuple[str, str]] = set()  # (hit or miss, Job name) counted

    def status(
        self, kind: str, key: Key, status: dict[str, Any], spec: dict[str, Any] | None = None
    ) -> None:
        """The status as written (and the spec, for the cache volume's claim): the model's
        phase, the cache keys' bytes and queue, and a compile's duration once."""
        cache = status.get("cache") or {}
        seconds, job = cache.get("seconds"), cache.get("jobName")
        role = waiting_role(status)
        with self._lock:
            self.cache_keys.record((kind, *key), status, spec)
            if role is None:
                self.unschedulable.pop((kind, *key), None)
            else:
                self.unschedulable[(kind, *key)] = role
            if status.get("phase") and kind == KIND:
                self.phases[key] = status["phase"]
                ready = int(status.get("readyReplicas") or 0)
                self.from_cache[key] = (ready, int(status.get("replicasFromCache") or 0))
            if job and cache.get("notPulled") and ("miss", job) not in self._pulls_seen:
                self._pulls_seen.add(("miss", job))
                self.pulls["miss"] += 1
            if not isinstance(seconds, int | float) or cache.get("ok") is not True:
                return
            if cache.get("pulledFrom"):
                if job and ("hit", job) not in self._pulls_seen:
                    self._pulls_seen.add(("hit", job))
                    self.pulls["hit"] += 1
                    self.pull.observe(float(seconds))
            elif job and job not in self._compiles_seen:
                self._compiles_seen.add(job)
                self.compile.observe(float(seconds))

    def forget(self, kind: str, key: Key) -> None:
        with self._lock:
            self.unschedulable.pop((kind, *key), None)
            self.cache_keys.forget((kind, *key))
            if kind == KIND:
                self.phases.pop(key, None)
                self.from_cache.pop(key, None)

    def snapshot(
        self,
    ) -> tuple[
        dict[Key, str],
        list[str],
        dict[tuple[str, str, str], str],
        dict[Key, tuple[int, int]],
    ]:
        """(phases, compile histogram lines, the objects with a pod no node takes, each
        model's ready replicas and those started from the cache)."""
        with self._lock:
            return (
                dict(self.phases),
                self.compile.lines(f"{PREFIX}_compile_duration_seconds"),
                dict(self.unschedulable),
                dict(self.from_cache),
            )

    def cache_snapshot(self) -> tuple[dict[tuple[str, str, str], int], dict[str, int]]:
        """(bytes of each compiled key by namespace, claim and short key; keys queued by
        namespace)."""
        with self._lock:
            return self.cache_keys.key_bytes(), self.cache_keys.queued()

    def pull_lines(self) -> list[str]:
        """The cache registry's families: pulls by result, and the pulls' durations."""
        name = f"{PREFIX}_cache_pulls_total"
        with self._lock:
            samples = [f'{name}{{result="{r}"}} {self.pulls[r]}' for r in ("hit", "miss")]
            durations = self.pull.lines(f"{PREFIX}_pull_duration_seconds")
        return [
            *_family(
                name,
                "counter",
                "Keys a cache registry was asked for: hit (pulled, no compile) or miss (compiled "
                "after all: not there, refused or unreachable; status.cache.notPulled says "
                "which).",
                samples,
            ),
            *_family(
                f"{PREFIX}_pull_duration_seconds",
                "histogram",
                "Time of a successful pull Job, as its pod reported it (each pull Job once).",
                durations,
            ),
        ]


def waiting_role(status: dict[str, Any]) -> str | None:
    """Whose pod no node takes, as the status says (Ready's reason Unschedulable): the
    download's (weights), the compile's, or the serving Deployment's (serve)."""
    by_type = {c.get("type"): c for c in status.get("conditions") or []}
    if (by_type.get(READY) or {}).get("reason") != UNSCHEDULABLE:
        return None
    if (by_type.get(CACHE_READY) or {}).get("reason") != UNSCHEDULABLE:
        return "serve"
    return "weights" if status.get("phase") == "Downloading" else "compile"


def _family(name: str, kind: str, help_text: str, samples: Iterable[str]) -> Iterator[str]:
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"
    yield from samples


def _by_kind(name: str, help_text: str, counts: dict[str, int]) -> Iterator[str]:
    """A counter family with one sample per kind."""
    samples = [f'{name}{{kind="{k}"}} {n}' for k, n in sorted(counts.items())]
    return _family(name, "counter", help_text, samples)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(
    stats: Counter[str],
    metrics: Metrics,
    writes: dict[str, int],
    dry_runs: dict[str, int],
    reads: int,
    received: dict[str, int],
    last_pass: tuple[int, float] | None = None,
    loop: LoopStats | None = None,
) -> Iterator[str]:
    """The text exposition of everything the operator counts, line by line (metrics_server.serve
    writes it as it comes: at 10,000 SpyreModels their three families are 30,000 lines,
    which as one text, its list of lines and its bytes held ~12 MB at each scrape)."""
    p = PREFIX
    phases, compile_, unschedulable, from_cache = metrics.snapshot()
    errors = loop.errors if loop is not None else {}
    durations = loop.durations if loop is not None else Histogram(RECONCILE_BUCKETS)
    reconcile = durations.lines(f"{p}_reconcile_duration_seconds")
    by_phase = Counter(phases.values())
    counters = [
        ("reconciles_total", "Reconciles run (events, resyncs, retries).", stats["reconciles"]),
        ("reconcile_conflicts_total", "Status writes refused as stale (409).", stats["conflicts"]),
        (
            "status_writes_total",
            "Status writes (SpyreModels, SpyreCaches).",
            stats["status_writes"],
        ),
        ("reconcile_retries_total", "Reconciles run again after a failure.", stats["retries"]),
        ("api_writes_total", "Writes to the API server, of every kind.", sum(writes.values())),
        ("api_reads_total", "Reads (GET, LIST) of the reconciles; the watches not counted.", reads),
        ("resync_passes_total", "Resync passes completed.", stats["resync_passes"]),
    ]
    for name, help_text, value in counters:
        yield from _family(f"{p}_{name}", "counter", help_text, [f"{p}_{name} {value}"])
    yield from _family(
        f"{p}_reconcile_errors_total",
        "counter",
        "Reconciles that failed, by reason (the API status code or the error's type).",
        [
            f'{p}_reconcile_errors_total{{reason="{_label(r)}"}} {n}'
            for r, n in sorted(errors.items())
        ],
    )
    requests = []
    for request, count in sorted(writes.items()):
        verb, kind = request.split(" ", 1)
        requests.append(f'{p}_api_requests_total{{verb="{verb}",kind="{kind}"}} {count}')
    yield from _family(f"{p}_api_requests_total", "counter", "Writes by verb and kind.", requests)
    yield from _by_kind(
        f"{p}_dry_runs_total",
        "Children dry-run (dryRun=All) before a download or compile starts, by kind.",
        dry_runs,
    )
    yield from _by_kind(
        f"{p}_watch_events_total",
        "Objects the watches of the children received (listed or in an event), by kind.",
        received,
    )
    yield from _family(
        f"{p}_reconcile_duration_seconds", "histogram", "Time of one reconcile.", reconcile
    )
    yield from _family(
        f"{p}_compile_duration_seconds",
        "histogram",
        "Time of a successful compile, as its pod reported it (each compile Job once).",
        compile_,
    )
    yield from metrics.pull_lines()
    yield from _family(
        f"{p}_models",
        "gauge",
        "SpyreModels by phase.",
        [f'{p}_models{{phase="{_label(k)}"}} {n}' for k, n in sorted(by_phase.items())],
    )
    yield from _family(
        f"{p}_model_phase",
        "gauge",
        "1 for the phase each SpyreModel is in.",
        (
            f'{p}_model_phase{{namespace="{_label(ns)}",name="{_label(name)}",'
            f'phase="{_label(phase)}"}} 1'
            for (ns, name), phase in sorted(phases.items())
        ),
    )
    yield from _family(
        f"{p}_model_replicas_from_cache",
        "gauge",
        "Each SpyreModel's ready serving pods whose start-up compiled nothing (every graph "
        "from the cache; beside model_ready_replicas).",
        (
            f'{p}_model_replicas_from_cache{{namespace="{_label(ns)}",name="{_label(name)}"}} {n}'
            for (ns, name), (_, n) in sorted(from_cache.items())
        ),
    )
    yield from _family(
        f"{p}_model_ready_replicas",
        "gauge",
        "Each SpyreModel's ready serving pods.",
        (
            f'{p}_model_ready_replicas{{namespace="{_label(ns)}",name="{_label(name)}"}} {n}'
            for (ns, name), (n, _) in sorted(from_cache.items())
        ),
    )
    yield from _family(
        f"{p}_unschedulable",
        "gauge",
        "1 for each SpyreModel and SpyreCache with a pod no node takes (no node with the "
        "cards, CPU or memory it asks for, ...), by whose pod: weights, compile or serve.",
        (
            f'{p}_unschedulable{{kind="{kind}",namespace="{_label(ns)}",name="{_label(name)}",'
            f'role="{role}"}} 1'
            for (kind, ns, name), role in sorted(unschedulable.items())
        ),
    )
    key_bytes, queued = metrics.cache_snapshot()
    yield from _family(
        f"{p}_cache_key_bytes",
        "gauge",
        "Bytes each compiled cache key holds on its cache volume (claim), as its compile "
        "reported them in the SpyreCaches' status; each key once.",
        (
            f'{p}_cache_key_bytes{{namespace="{_label(ns)}",claim="{_label(claim)}",'
            f'key="{key}"}} {size}'
            for (ns, claim, key), size in sorted(key_bytes.items())
        ),
    )
    yield from _family(
        f"{p}_compile_queue_keys",
        "gauge",
        "Cache keys whose compile waits for a free slot (CacheReady reason Queued), by "
        "namespace (0 in one with SpyreModels or SpyreCaches and none waiting).",
        [f'{p}_compile_queue_keys{{namespace="{_label(ns)}"}} {n}' for ns, n in queued.items()],
    )
    if last_pass is not None:  # a pass longer than --resync-seconds delays the next one
        objects, seconds = last_pass
        yield from _family(
            f"{p}_resync_pass_seconds",
            "gauge",
            "The last resync pass, from its start to its last object queued.",
            [f"{p}_resync_pass_seconds {seconds:.3f}"],
        )
        yield from _family(
            f"{p}_resync_pass_objects",
            "gauge",
            "SpyreModels and SpyreCaches the last resync pass queued.",
            [f"{p}_resync_pass_objects {objects}"],
        )
    if loop is not None:
        yield from _loop(loop)
    yield from _family(
        f"{p}_build_info",
        "gauge",
        "The operator's version.",
        [f'{p}_build_info{{version="{__version__}"}} 1'],
    )


def _loop(loop: LoopStats) -> Iterator[str]:
    """The work queue's: how many keys wait and run, how long they wait, how runs end."""
    p = PREFIX
    yield from _family(
        f"{p}_workqueue_depth",
        "gauge",
        "Keys waiting for a worker, by lane (trigger: events and retries; low: the resync's "
        "and the inventory's).",
        [f'{p}_workqueue_depth{{lane="{lane}"}} {n}' for lane, n in sorted(loop.waiting.items())],
    )
    yield from _family(
        f"{p}_workqueue_in_flight",
        "gauge",
        "Reconciles running now.",
        [f"{p}_workqueue_in_flight {loop.running}"],
    )
    yield from _family(
        f"{p}_workqueue_wait_seconds",
        "histogram",
        "Time a key waited in the queue before a worker took it.",
        loop.wait.lines(f"{p}_workqueue_wait_seconds"),
    )
    results = [
        f'{p}_reconcile_results_total{{result="{r}"}} {loop.results.get(r, 0)}'
        for r in ("success", "requeue", "error")
    ]
    yield from _family(
        f"{p}_reconcile_results_total",
        "counter",
        "Reconciles ended, by result: success, requeue (it asked to run again at a time), "
        "error (tried again after a pause).",
        results,
    )
