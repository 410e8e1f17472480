"""An image that cannot run, on the API server (the tests play the kubelet by writing pod
status): a weights or compile pod that cannot pull its image, a compile pod the image's
own check refuses, a serving pod of another architecture. Each ends in reason
ImageUnusable naming the image and what to set, with a Warning Event; a pull that works
at last lets the model go on by itself."""

from __future__ import annotations

import json
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render.weights_job import weights_job_name
from spyre_runtime.contract import IMAGE_UNUSABLE

pytestmark = pytest.mark.integration

SAID = 'Back-off pulling image "registry.example.com/spyre-serving/runtime:0.1.0": 401 Unauthorized'
NO_VLLM = "the image's Python (/usr/bin/python3) has no vLLM: name a vLLM-Spyre image in spec.image"


def unusable(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The status once Degraded says ImageUnusable (Ready says the same)."""
    st = sim.status(kube, namespace, name)
    degraded, ready = sim.condition(st, "Degraded"), sim.condition(st, "Ready")
    said = degraded[:2] == ("True", IMAGE_UNUSABLE) and ready[1:] == degraded[1:]
    return st if said else None


def warned(kube: Kube, namespace: str, name: str) -> None:
    sim.wait_for(
        lambda: ("Warning", IMAGE_UNUSABLE) in sim.events_for(kube, namespace, name),
        "a Warning Event ImageUnusable",
    )


def _image(kube: Kube, namespace: str, kind: str, name: str) -> str:
    image: str = kube.get(kind, namespace, name)["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    return image


def test_a_weights_and_a_compile_pod_without_their_image_say_which_and_what_to_set(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "m")
    sim.create(kube, doc)
    weights = weights_job_name(parse(doc).spec)
    sim.wait_for(lambda: kube.get("Job", namespace, weights), f"Job {weights}")
    pod = simulate.pull_failing_pod(kube, "Job", namespace, weights, SAID)
    st = sim.wait_for(lambda: unusable(kube, namespace, "m"), "Degraded ImageUnusable")
    assert st["phase"] == "Failed"
    image = _image(kube, namespace, "Job", weights)
    message = sim.condition(st, "Degraded")[2]
    assert message.startswith(
        f"the download cannot start: pod {pod}: image {image} cannot be pulled "
        f"(ImagePullBackOff: {SAID}): check that spec.image names"
    ), message
    assert sim.condition(st, "CacheReady")[:2] == ("False", IMAGE_UNUSABLE)
    assert sim.condition(st, "Stalled")[:2] == ("True", IMAGE_UNUSABLE)
    warned(kube, namespace, "m")
    kube.delete("Pod", namespace, pod)  # pulled at last: the download goes on
    sim.wait_phase(kube, namespace, "m", "Downloading")

    job = sim.compile_job(kube, doc)
    pod = simulate.pull_failing_pod(kube, "Job", namespace, job, SAID)
    st = sim.wait_for(lambda: unusable(kube, namespace, "m"), "the compile's pod in status")
    message = sim.condition(st, "Degraded")[2]
    assert message.startswith("the compile of cache "), message
    assert f"cannot start: pod {pod}: image {image} cannot be pulled" in message, message
    kube.delete("Pod", namespace, pod)
    sim.wait_phase(kube, namespace, "m", "Compiling")


def test_a_compile_the_images_check_refused_and_a_foreign_serving_pod(
    kube: Kube, namespace: str, operator: sim.Operator
) -> None:
    doc = sim.model(namespace, "img")
    sim.create(kube, doc)
    sim.download(kube, doc)
    sim.wait_phase(kube, namespace, "img", "Compiling")
    job = sim.job_name(doc)
    sim.wait_for(lambda: kube.get("Job", namespace, job), f"Job {job}")
    image = _image(kube, namespace, "Job", job)
    refusal = json.dumps({"ok": False, "reason": IMAGE_UNUSABLE, "message": NO_VLLM})
    simulate.finish_job(kube, namespace, job, exit_code=2, reason="Error", message=refusal)
    st = sim.wait_for(lambda: unusable(kube, namespace, "img"), "Degraded ImageUnusable")
    assert st["phase"] == "Failed"
    assert (st["cache"]["ok"], st["cache"]["reason"]) == (False, IMAGE_UNUSABLE)
    assert sim.condition(st, "Degraded")[2].startswith(
        f"the compile pod {job}-0: image {image}: {NO_VLLM}."
    )
    warned(kube, namespace, "img")

    # another key (a spec the image's check would pass) compiles; its serving pod is of
    # another architecture
    sim.spec_patch(kube, namespace, "img", {"batching": {"continuous": {"maxModelLen": 1024}}})
    new_job = sim.job_name(sim.get(kube, namespace, "img"))
    assert new_job != job
    sim.wait_for(lambda: kube.get("Job", namespace, new_job), f"Job {new_job}")
    simulate.complete_job(kube, namespace, new_job)
    sim.wait_phase(kube, namespace, "img", "Starting")
    foreign = "exec /opt/vllm/bin/python3: exec format error"
    simulate.crash_serving_pod(kube, namespace, "img", foreign, exit_code=255)
    st = sim.wait_for(lambda: unusable(kube, namespace, "img"), "the serving pod's image")
    assert st["phase"] == "Degraded"
    assert sim.condition(st, "Available")[:2] == ("False", IMAGE_UNUSABLE)
    message = sim.condition(st, "Degraded")[2]
    assert f"image {image} is not built for the node's CPU ({foreign})" in message, message
    assert "spec.runtime.architecture" in message
