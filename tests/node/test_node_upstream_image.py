"""A serving image without spyre-runtime, run unmodified through the injected runtime, on
the real node: the CPU runtime base (vLLM and sendnn-inference from PyPI in a venv, the
user senuser, no file of spyre_runtime: docs/images.md) pushed to the node's registry as
`upstream-standin`, and a SpyreModel naming it with `runtime.imageProfile:
sendnn-inference` and `cache.requirePrecompiled: true` (a decoder's default, set here so
the story says it). The compile Job fills the cache, the serving pods start from it with
the image's own vLLM stopped at the first compile a start-up would make (the switch in
their env), report 0 compiled and answer through the Service, and a second replica
starts from the cache too.
The same with `ubi-standin`, the layout of Red Hat's UBI images (user 1001, vLLM's venv at
/opt/vllm, an entrypoint script, a device setup script, ENV the pods override).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl

from spyre_devcluster import node_operator
from spyre_devcluster.images import recipes
from spyre_devcluster.images.push import push
from spyre_devcluster.node import Node
from spyre_devcluster.simulate import poll_until
from spyre_operator import __version__
from spyre_runtime import contract

pytestmark = pytest.mark.node

MODEL = "standin"
STANDINS = {"upstream-standin": recipes.upstream_standin, "ubi-standin": recipes.ubi_standin}
WAIT = 1500  # a compile plus a serving start, on a loaded 2-core machine
COMPILE = "app.kubernetes.io/component=compile"


def _serving_pods(kubectl: Kubectl) -> list[dict[str, Any]]:
    selector = kubectl.get(f"spyremodel/{MODEL}")["status"]["selector"]
    items: list[dict[str, Any]] = kubectl.get("pods", "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _started_from_the_cache(kubectl: Kubectl, pod: dict[str, Any]) -> None:
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "spyre_runtime"]
    switch = contract.FLAVOURS[node_operator.FLAVOUR].require_precompiled_var
    assert {"name": switch, "value": "1"} in container["env"], container["env"]
    reports = contract.startup(kubectl("logs", pod["metadata"]["name"], "-c", "vllm"))
    assert reports, "no start-up compile report in the serving pod's log"
    for counts in reports.values():
        assert counts.from_cache and not counts.compiled, counts


@pytest.mark.parametrize("standin", list(STANDINS))
def test_an_image_without_the_runtime_compiles_once_and_serves_from_the_cache(
    operator_node: Node, kubectl: Kubectl, weights: Path, standin: str
) -> None:
    node = operator_node
    flavour = node_operator.FLAVOUR
    tag = recipes.runtime_tag(flavour)
    push(STANDINS[standin](flavour), node.registry, standin, tag)
    doc = node_operator.tiny_model(MODEL)
    doc["spec"]["image"] = f"{node.registry.repository(standin)}:{tag}"
    doc["spec"]["runtime"]["imageProfile"] = "sendnn-inference"  # IBM's images' profile
    doc["spec"]["cache"]["requirePrecompiled"] = True
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    kubectl.wait(f"sm/{MODEL}", "condition=Ready", WAIT)

    operator_image = f"{node.registry.repository(node_operator.OPERATOR_IMAGE)}:{__version__}"
    (job,) = kubectl.get("jobs", "-l", COMPILE)["items"]
    assert job["status"].get("succeeded") == 1
    job_pod = job["spec"]["template"]["spec"]
    assert [c["image"] for c in job_pod["initContainers"]] == [operator_image]
    assert job_pod["containers"][0]["image"] == doc["spec"]["image"]
    status = kubectl.get(f"spyremodel/{MODEL}")["status"]
    assert status["cache"]["ok"] is True, status["cache"]
    # the injected copy compiled, with the image's own vLLM and plugin
    assert status["cache"]["versions"]["spyre_runtime"] == __version__, status["cache"]
    assert status["cache"]["versions"]["sendnn_inference"] != "not installed"

    (first,) = _serving_pods(kubectl)
    _started_from_the_cache(kubectl, first)
    if standin == "ubi-standin":  # its user and venv; its device setup was sourced
        who = ["python3", "-c", "import os, sys; print(os.getuid(), sys.prefix)"]
        assert kubectl("exec", first["metadata"]["name"], "-c", "vllm", "--", *who).split() == [
            "1001",
            recipes.UBI_VENV,
        ]
        log = kubectl("logs", first["metadata"]["name"], "-c", "vllm")
        assert "sourced /etc/profile.d/ibm-aiu-setup.sh: SPYRE_STANDIN_DEVICE_SETUP" in log
    service = kubectl.get(f"service/{MODEL}")["spec"]
    got = node_operator.complete(service["clusterIP"], service["ports"][0]["port"], "Hello")
    assert got["usage"]["completion_tokens"] >= 1, got

    # a second replica starts from the same cache; nothing compiles again
    kubectl("scale", f"sm/{MODEL}", "--replicas=2")

    def two_ready() -> bool:
        s = kubectl.get(f"spyremodel/{MODEL}")["status"]
        return s.get("readyReplicas") == 2 and s.get("replicasFromCache") == 2

    poll_until(two_ready, "the second replica Ready", WAIT, interval=2.0)
    second = [p for p in _serving_pods(kubectl) if p["metadata"]["uid"] != first["metadata"]["uid"]]
    (added,) = second
    _started_from_the_cache(kubectl, added)
    assert len(kubectl.get("jobs", "-l", COMPILE)["items"]) == 1
