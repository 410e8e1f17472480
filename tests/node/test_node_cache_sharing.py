"""Compile once per fleet, on the real node (issue 33, docs/cache-sharing.md): the node's
registry (TLS from its own CA, basic auth, on the node's address where pods reach it) as
the cache registry of two namespaces, each with its own cache volume. The first compiles
the tiny Granite's key and publishes it; the second, with the same spec, pulls it instead
of compiling: it serves, its pod's report says it compiled nothing, no compile Job ever
ran there, and its inventory lists the key as pulled. Both choose the registry in their
spec (`spec.cache.registry`), so the operator the other node tests share is left as the
chart installed it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, SharedNode
from test_node_stories import Cluster, assert_started_from_cache, compile_reports

from spyre_devcluster import node_operator
from spyre_operator.render import meta

pytestmark = pytest.mark.node

NAME = "shared"
SECRET = "spyre-cache-registry"  # .dockerconfigjson and ca.crt, as docs/cache-sharing.md says


def place(shared_node: SharedNode, models: Path, prefix: str) -> Cluster:
    """A namespace with the image pull Secret and the cache registry's Secret."""
    node = shared_node.with_operator()
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    Kubectl(node.kubeconfig, "default")("create", "namespace", namespace)
    node_operator.add_pull_secret(node, namespace)
    kubectl = Kubectl(node.kubeconfig, namespace)
    kubectl("apply", "-f", "-", input=json.dumps(node.registry.cache_secret(SECRET, namespace)))
    return Cluster(node, kubectl, namespace, models)


@pytest.fixture
def places(shared_node: SharedNode, models: Path) -> Iterator[tuple[Cluster, Cluster]]:
    made = (place(shared_node, models, "publish"), place(shared_node, models, "pull"))
    yield made
    for cluster in made:
        Kubectl(cluster.node.kubeconfig, "default")(
            "delete", "namespace", cluster.namespace, "--wait=false"
        )


def apply(cluster: Cluster, repository: str) -> None:
    doc = node_operator.tiny_model(cluster.models, NAME)
    doc["spec"]["cache"]["registry"] = {"repository": repository, "secretName": SECRET}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == kind)
    return found


def test_a_key_compiled_and_published_in_one_namespace_is_pulled_and_served_in_another(
    places: tuple[Cluster, Cluster],
) -> None:
    first, second = places
    started = time.monotonic()
    # A repository of this run's own: the registry's storage outlives the node (it is kept
    # in the cache), and an artifact an earlier run published would be pulled by the first.
    repository = first.node.registry.repository(f"caches-{uuid.uuid4().hex[:8]}")
    apply(first, repository)

    def published() -> dict[str, Any] | None:
        cache: dict[str, Any] = first.status(NAME).get("cache") or {}
        return cache if cache.get("publishedTo") else None

    made = first.wait("the first namespace's compile published", published)
    compiled = time.monotonic()
    key = made["cacheKey"]
    print(f"compiled and published in {compiled - started:.0f} s: {made}")
    assert made["ok"] is True and made["jobName"].startswith("spyre-compile-"), made
    assert made["notPulled"].startswith("NotInRegistry: "), made  # asked first: a miss
    assert made["publishedTo"].startswith(f"{repository}:{key}-"), made
    assert made["bytesMoved"] > 0, made  # a repository of its own: every blob sent
    assert any(c.compiled for c in compile_reports(first, f"job/{made['jobName']}"))
    # Its serving start is not this story: the 2 cores go to the second namespace's.
    first.kubectl("delete", "spyremodel", NAME, "--wait=false")

    apply(second, repository)
    status = second.ready(NAME)
    served = time.monotonic()
    cache = status["cache"]
    print(f"pulled and served in {served - compiled:.0f} s: {cache}")
    assert status["activeCacheKey"] == key, status
    assert cache["ok"] is True and cache["jobName"].startswith("spyre-pull-"), cache
    assert cache["pulledFrom"] == made["publishedTo"], cache
    assert cache["bytesMoved"] == made["bytesMoved"], (cache, made)
    ready = condition(status, "CacheReady")
    assert ready["reason"] == "Pulled" and made["publishedTo"] in ready["message"], ready
    # no compile Job ever ran in the second namespace: none is there, none was created
    assert second.jobs() == {}
    selector = f"involvedObject.kind=SpyreModel,involvedObject.name={NAME}"
    said = [e["message"] for e in second.get("events", "--field-selector", selector)["items"]]
    assert any(f"pulling cache {key[:12]} from {repository}" in m for m in said), said
    assert not any("spyre-compile-" in m for m in said), said
    second.wait("from the cache", lambda: second.status(NAME).get("replicasFromCache") == 1)
    (pod,) = second.pods(NAME)
    assert_started_from_cache(second, pod)  # its report: loaded from the cache, 0 compiled
    assert second.answer(*second.service(NAME))
    # the namespace's inventory lists the key it only pulled: where from, the bytes moved
    entry = meta.inventory_name(key)

    def listed() -> dict[str, Any] | None:
        found: dict[str, Any] = second.get(f"scache/{entry}").get("status") or {}
        return found if found.get("usedBy") == [NAME] else None

    inventory = second.wait("the pulled key's inventory entry", listed, timeout=120)
    assert inventory["cache"]["pulledFrom"] == made["publishedTo"], inventory
    assert inventory["cache"]["bytesMoved"] == made["bytesMoved"], inventory
    row = second.kubectl("get", "scache", entry, "--no-headers").split()
    assert row[:3] == [entry, "Ready", "Pulled"], row  # NAME PHASE CACHE ...
    print(f"the story took {time.monotonic() - started:.0f} s")
