"""A weights or compile Job whose pod cannot pull its image: the model says so in the
kubelet's own words (reason ImagePullBackOff and its message) while it waits, as it does
for serving pods, and says it no more once the pod runs."""

from __future__ import annotations

from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration

SAID = 'Back-off pulling image "registry.example.com/spyre-serving/runtime:0.1.0": 401 Unauthorized'


def stuck(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The status once CacheReady gives the kubelet's reason (Progressing too; Ready's
    reason stays the phase, its message is CacheReady's, as Available's is for serving
    pods)."""
    st = sim.status(kube, namespace, name)
    cache, progressing = sim.condition(st, "CacheReady"), sim.condition(st, "Progressing")
    said = cache[1] == progressing[1] == "ImagePullBackOff" and cache[2] == progressing[2]
    return st if said and sim.condition(st, "Ready")[2] == cache[2] else None


def test_a_weights_and_a_compile_pod_without_their_image_say_why(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "m")
    sim.create(kube, doc)
    weights = weights_job_name(parse(doc).spec)
    sim.wait_for(lambda: kube.get("Job", namespace, weights), f"Job {weights}")
    pod = simulate.pull_failing_pod(kube, "Job", namespace, weights, SAID)
    st = sim.wait_for(lambda: stuck(kube, namespace, "m"), "CacheReady reason ImagePullBackOff")
    assert st["phase"] == "Downloading"
    ready = sim.condition(st, "Ready")
    assert ready == (
        "False",
        "Downloading",
        f"the download cannot start: pod {pod}: ImagePullBackOff: {SAID}",
    )
    kube.delete("Pod", namespace, pod)  # pulled at last: the download goes on

    job = sim.compile_job(kube, doc)
    pod = simulate.pull_failing_pod(kube, "Job", namespace, job, SAID)
    st = sim.wait_for(lambda: stuck(kube, namespace, "m"), "the compile's pod in status")
    assert st["phase"] == "Compiling"
    ready = sim.condition(st, "Ready")
    assert ready[1] == "Compiling", ready
    assert ready[2].endswith(f"cannot start: pod {pod}: ImagePullBackOff: {SAID}"), ready
    assert ready[2].startswith("the compile of cache "), ready
    kube.delete("Pod", namespace, pod)
    sim.wait_for(
        lambda: (
            sim.condition(sim.status(kube, namespace, "m"), "CacheReady")[1] == "Compiling" or None
        ),
        "the pull failure no more in status",
    )
