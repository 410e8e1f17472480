"""The resync's LIST on a real API server: pages of metadata only (no bodies held while a
page is spread over the period), which still bring every key and its resourceVersion."""

from __future__ import annotations

import pytest
from cluster_sim import create, model

from spyre_devcluster import simulate
from spyre_operator.api.names import KIND
from spyre_operator.controller import triggers
from spyre_operator.controller.failures import complain
from spyre_operator.controller.triggers import Resync
from spyre_operator.controller.workqueue import WorkQueue
from spyre_operator.kube.client import METADATA_ONLY, Kube, path

pytestmark = pytest.mark.integration


def test_the_resync_lists_keys_and_versions_from_metadata_only_pages(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulate.install_crds(kube)
    made = [create(kube, model(namespace, f"m{i}")) for i in range(3)]
    page = kube.request("GET", path(KIND, namespace), query={"limit": "2"}, accept=METADATA_ONLY)
    assert page["kind"] == "PartialObjectMetadataList"
    assert [set(item) for item in page["items"]] == [{"apiVersion", "kind", "metadata"}] * 2
    assert page["metadata"]["continue"]  # a third one on the next page

    monkeypatch.setattr(triggers, "PAGE", 2)  # two pages: the continue token followed
    queue = WorkQueue(lambda key: None, complain)  # never started: the LIST only
    resync = Resync(kube, queue, lambda: 3, 60.0, kinds=[KIND], namespaces=[namespace])
    assert sorted(resync.listed()) == sorted(
        ((KIND, namespace, m["metadata"]["name"]), m["metadata"]["resourceVersion"]) for m in made
    )
