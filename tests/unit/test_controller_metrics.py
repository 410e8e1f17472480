"""The cache families of the operator's metrics, from the statuses as written: each
compiled key's bytes once per volume (an inventory entry and a user's SpyreCache of one
key report the same compile), and the keys queued for a compile, by namespace; and a
scrape's body, written CHUNK lines at a time."""

from __future__ import annotations

import socket
import urllib.request
from collections import Counter
from typing import Any

import pytest

from spyre_operator.api.names import CACHE_KIND, KIND
from spyre_operator.controller.metrics import Metrics, exposition
from spyre_operator.controller.metrics_server import CHUNK, parse, serve

pytestmark = pytest.mark.unit

KEY = "a" * 64
OTHER = "b" * 64


def cache_ready(status: str, reason: str) -> list[dict[str, str]]:
    return [{"type": "CacheReady", "status": status, "reason": reason}]


def compiled(key: str, size: int) -> dict[str, Any]:
    summary = {"ok": True, "cacheKey": key, "bytes": size, "jobName": f"c-{key[:8]}"}
    return {"phase": "Ready", "targetCacheKey": key, "cache": summary,
            "conditions": cache_ready("True", "Compiled")}  # fmt: skip


def queued(key: str) -> dict[str, Any]:
    return {"phase": "Compiling", "targetCacheKey": key,
            "conditions": cache_ready("False", "Queued")}  # fmt: skip


def samples(metrics: Metrics) -> dict[str, float]:
    """The cache families' samples; each series once (Prometheus refuses a scrape with a
    series twice)."""
    text = "\n".join(exposition(Counter(), metrics, {}, {}, 0, {}))
    ours = ("spyre_operator_cache_key_bytes", "spyre_operator_compile_queue")
    lines = [line for line in text.splitlines() if line.startswith(ours)]
    series = [line.rpartition(" ")[0] for line in lines]
    assert len(series) == len(set(series)), lines
    return parse("\n".join(lines))


def test_a_key_counts_once_per_volume_and_goes_with_its_last_spyrecache() -> None:
    metrics = Metrics()
    on_fast = {"cache": {"volume": {"claimName": "fast"}}}
    metrics.status(CACHE_KIND, ("team", "spyre-cache-aaaa"), compiled(KEY, 100), {})
    metrics.status(CACHE_KIND, ("team", "mine"), compiled(KEY, 100), {})  # a user's, same key
    metrics.status(CACHE_KIND, ("team", "other"), compiled(OTHER, 7), on_fast)
    metrics.status(KIND, ("team", "model"), compiled(KEY, 100), {})  # a model's: not counted
    short, name = KEY[:12], "spyre_operator_cache_key_bytes"
    assert samples(metrics) == {
        f'{name}{{namespace="team",claim="fast",key="{OTHER[:12]}"}}': 7,
        f'{name}{{namespace="team",claim="spyre-graph-cache",key="{short}"}}': 100,
        'spyre_operator_compile_queue_keys{namespace="team"}': 0,
    }
    metrics.forget(CACHE_KIND, ("team", "spyre-cache-aaaa"))
    assert len([k for k in samples(metrics) if f'key="{short}"' in k]) == 1  # "mine" keeps it
    metrics.forget(CACHE_KIND, ("team", "mine"))
    assert not [k for k in samples(metrics) if f'key="{short}"' in k]


def test_the_queue_counts_keys_not_the_objects_waiting_for_them() -> None:
    metrics = Metrics()
    metrics.status(KIND, ("a", "one"), queued(KEY))
    metrics.status(KIND, ("a", "two"), queued(KEY))  # the same key: one compile
    metrics.status(CACHE_KIND, ("a", "ahead"), queued(OTHER))
    metrics.status(KIND, ("b", "three"), compiled(KEY, 1))
    got = samples(metrics)
    assert got['spyre_operator_compile_queue_keys{namespace="a"}'] == 2
    assert got['spyre_operator_compile_queue_keys{namespace="b"}'] == 0
    metrics.status(KIND, ("a", "one"), compiled(KEY, 1))
    metrics.forget(KIND, ("a", "two"))
    assert samples(metrics)['spyre_operator_compile_queue_keys{namespace="a"}'] == 1


def test_a_scrape_longer_than_a_chunk_is_the_whole_exposition() -> None:
    """The body is written as the lines come and ended by closing the connection: every
    line arrives once, in order, across the chunks' seams."""
    metrics = Metrics()
    for i in range(2 * CHUNK):  # a model_phase line each: the text spans several chunks
        metrics.status(KIND, ("ns", f"m{i:05d}"), {"phase": "Compiling"})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = serve(lambda: exposition(Counter(), metrics, {}, {}, 0, {}), port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert body == "\n".join(exposition(Counter(), metrics, {}, {}, 0, {})) + "\n"
    phases = [line for line in body.splitlines() if line.startswith("spyre_operator_model_phase{")]
    assert len(phases) == 2 * CHUNK and len(body.splitlines()) > 2 * CHUNK
