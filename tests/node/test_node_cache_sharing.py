"""Compile once per fleet, on the real node (issue 33, docs/cache-sharing.md): the node's
registry (TLS from its own CA, basic auth, on the node's address where pods reach it) as
the cache registry of two namespaces, each with its own cache volume. The first compiles
the tiny Granite's key and publishes it; the second, with the same spec, pulls it instead
of compiling: it serves, its pod's report says it compiled nothing, no compile Job ever
ran there, and its inventory lists the key as pulled. Then one byte of a file in its
layer is changed in the registry's own storage: a third namespace's pull Job refuses the
artifact, the model says which check failed, nothing that looks ready is left in its
volume, and the key compiles there instead. Each chooses the registry in its spec
(`spec.cache.registry`), so the operator the other node tests share is left as the chart
installed it.
"""

from __future__ import annotations

import contextlib
import json
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from nodelib import SharedNode
from test_node_stories import (
    Cluster,
    assert_started_from_cache,
    compile_reports,
    place,
    volume_folder,
)

from spyre_devcluster import node_operator, registry
from spyre_operator.render import meta
from spyre_runtime.cacheartifact import architecture, check_manifest, tag
from spyre_runtime.contract import READY_NAME
from spyre_runtime.ociregistry import Client, Repository

pytestmark = pytest.mark.node

NAME = "shared"
SECRET = "spyre-cache-registry"  # .dockerconfigjson and ca.crt, as docs/cache-sharing.md says


@pytest.fixture
def places(shared_node: SharedNode, models: Path) -> Iterator[tuple[Cluster, Cluster, Cluster]]:
    """Three namespaces, each with the cache registry's Secret too."""
    with ExitStack() as stack:
        publish, pull, refuse = (
            stack.enter_context(place(shared_node, models, prefix))
            for prefix in ("publish", "pull", "refuse")
        )
        for cluster in (publish, pull, refuse):
            secret = cluster.node.registry.cache_secret(SECRET, cluster.namespace)
            cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))
        yield publish, pull, refuse


def apply(cluster: Cluster, repository: str) -> None:
    doc = node_operator.tiny_model(NAME)
    doc["spec"]["cache"]["registry"] = {"repository": repository, "secretName": SECRET}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in status["conditions"] if c["type"] == kind)
    return found


def said(cluster: Cluster) -> list[str]:
    """The messages of the model's Events."""
    selector = f"involvedObject.kind=SpyreModel,involvedObject.name={NAME}"
    return [e["message"] for e in cluster.get("events", "--field-selector", selector)["items"]]


@contextlib.contextmanager
def altered(cluster: Cluster, repository: str, key: str) -> Iterator[str]:
    """One byte of the first file in the key's layer changed where the node's registry
    keeps the blob (distribution's filesystem storage), put back after: blobs are stored
    once for every repository. Yields the file's name in the layer."""
    reg = cluster.node.registry
    client = Client(Repository.parse(repository), (reg.username, reg.password), reg.ca)
    got = client.manifest(tag(key, architecture()), 1 << 20)
    assert got is not None, f"{repository} has no artifact of {key}"
    digest = check_manifest(got[0], key, architecture()).tree.digest.removeprefix("sha256:")
    blob = registry.storage() / "docker/registry/v2/blobs/sha256" / digest[:2] / digest / "data"
    with tarfile.open(blob) as tar:  # a file's content, not a header: the digest must catch it
        member = next(m for m in tar.getmembers() if m.isreg() and m.size > 0)
    original = blob.read_bytes()
    data = bytearray(original)
    data[member.offset_data] ^= 0xFF
    blob.write_bytes(bytes(data))
    try:
        yield member.name
    finally:
        blob.write_bytes(original)


def test_a_key_compiled_and_published_in_one_namespace_is_pulled_and_served_in_another(
    places: tuple[Cluster, Cluster, Cluster],
) -> None:
    first, second, third = places
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
    events = said(second)
    assert any(f"pulling cache {key[:12]} from {repository}" in m for m in events), events
    assert not any("spyre-compile-" in m for m in events), events
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
    # BYTES: the key's size the compile recorded, from the READY record the pull verified
    assert inventory["cache"]["bytes"] == made["bytes"] > 0, (inventory, made)
    row = second.kubectl("get", "scache", entry, "--no-headers").split()
    assert row[:3] == [entry, "Ready", "Pulled"] and str(made["bytes"]) in row, row
    second.kubectl("delete", "spyremodel", NAME, "--wait=false")  # the cores to the third
    print(f"the story took {time.monotonic() - started:.0f} s")

    # A tampered artifact: the third namespace refuses it, says why, and compiles the key.
    with altered(third, repository, key) as changed:
        apply(third, repository)

        def refused() -> dict[str, Any] | None:
            cache: dict[str, Any] = third.status(NAME).get("cache") or {}
            return cache if cache.get("notPulled") else None

        cache = third.wait("the third namespace's pull refused", refused)
    print(f"refused ({changed} altered): {cache['notPulled']}")
    assert cache["notPulled"].startswith("ArtifactRefused: the registry's artifact was refused: ")
    assert "its manifest names: it was altered" in cache["notPulled"], cache
    # nothing the pull wrote looks ready: no READY of the key, no staging folder left
    folder = volume_folder(third)
    assert not (folder / key / READY_NAME).exists()
    assert not list(folder.glob(f".pulling-{key}-*"))
    events = said(third)
    assert any("the registry's copy was not used: ArtifactRefused: " in m for m in events), events
    row = third.kubectl("get", "sm", NAME, "--no-headers").split()
    assert row[1] == "Compiling" and "Pulled" not in row, row  # NAME PHASE CACHE ...

    def compiled_here() -> dict[str, Any] | None:
        cache: dict[str, Any] = third.status(NAME).get("cache") or {}
        return cache if cache.get("ok") else None

    done = third.wait("the key compiled in the third namespace", compiled_here)
    assert done["jobName"].startswith("spyre-compile-") and not done.get("pulledFrom"), done
    assert done["notPulled"] == cache["notPulled"], done  # still says why it compiled
    assert (folder / key / READY_NAME).exists()
    third.kubectl("delete", "spyremodel", NAME, "--wait=false")
    print(f"with the refusal, the story took {time.monotonic() - started:.0f} s")
