"""Cards on the node: the fake device plugin advertises ibm.com/spyre_pf, and the real
kubelet and scheduler count, admit and allocate them; the cards come back after the kubelet
restarts; a CPU stand-in SpyreModel holds its cards as a card model does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, apply, pod

from spyre_devcluster import node_operator
from spyre_devcluster.deviceplugin import device_ids, env_name
from spyre_devcluster.node import DEVICE_PLUGIN, Node
from spyre_devcluster.node_config import NODE_NAME, SPYRE_PF
from spyre_devcluster.simulate import poll_until

SHARED_CARDS = node_operator.NODE_CARDS

pytestmark = pytest.mark.node

ENV = env_name(SPYRE_PF)
# prints the ids the kubelet gave the container, then holds the cards
HOLD = f"import os, time; print(os.environ.get({ENV!r}, ''), flush=True); time.sleep(3600)"
WAIT = 120
MODEL_WAIT = 1500  # a compile plus a serving start, on a loaded 2-core machine


def card_pod(name: str, image: str, count: int) -> dict[str, object]:
    cards = {SPYRE_PF: str(count)}
    return pod(
        name,
        image,
        HOLD,
        container={"resources": {"limits": cards, "requests": cards}},
        terminationGracePeriodSeconds=0,
    )


def allocatable(kubectl: Kubectl) -> str | None:
    node = kubectl.get(f"node/{NODE_NAME}")
    found: str | None = node["status"].get("allocatable", {}).get(SPYRE_PF)
    return found


def cards_in_use(node: Node) -> int:
    """Cards requested by the pods bound to the node, in every namespace (pods of earlier
    tests may still be going)."""
    pods = Kubectl(node.kubeconfig, None).get("pods", "--all-namespaces")["items"]
    return sum(
        int(c.get("resources", {}).get("requests", {}).get(SPYRE_PF, "0"))
        for p in pods
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )


def wait_cards_free(node: Node) -> None:
    poll_until(lambda: cards_in_use(node) == 0, "no pod holds a card", WAIT, 0.5)


def held(kubectl: Kubectl, name: str) -> list[str]:
    """The card ids a running pod was given (what it printed)."""
    kubectl.wait(f"pod/{name}", "jsonpath={.status.phase}=Running", WAIT)
    logs = poll_until(lambda: kubectl("logs", name).strip(), f"{name} prints its cards", WAIT)
    return logs.split(",")


def unschedulable(kubectl: Kubectl, name: str) -> str | None:
    conditions = kubectl.get(f"pod/{name}")["status"].get("conditions", [])
    for c in conditions:
        if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
            message: str = c.get("message", "")
            return message
    return None


def test_the_kubelet_admits_pods_up_to_the_cards_and_no_further(
    node: Node, kubectl: Kubectl, python_image: str
) -> None:
    assert allocatable(kubectl) == str(SHARED_CARDS)
    wait_cards_free(node)
    half = SHARED_CARDS // 2
    apply(kubectl, card_pod("first", python_image, half), card_pod("second", python_image, half))
    first, second = held(kubectl, "first"), held(kubectl, "second")
    assert len(first) == len(second) == half
    assert sorted(first + second) == sorted(device_ids(SPYRE_PF, SHARED_CARDS))  # no card twice

    apply(kubectl, card_pod("third", python_image, 1))
    message = poll_until(
        lambda: unschedulable(kubectl, "third"), "the third pod is unschedulable", WAIT, 0.5
    )
    assert f"Insufficient {SPYRE_PF}" in message
    assert kubectl.get("pod/third")["status"]["phase"] == "Pending"

    kubectl("delete", "pod", "first", "--wait=true")  # its cards come back
    third = held(kubectl, "third")
    assert len(third) == 1 and third[0] in first


def test_the_cards_come_back_when_the_kubelet_restarts(
    node: Node, kubectl: Kubectl, python_image: str
) -> None:
    state = node.plane.load_state()
    assert state is not None
    (plugin,) = [p for p in state.processes if p.name == DEVICE_PLUGIN]

    def registrations() -> int:
        return Path(plugin.log).read_text().count(f"registered {SPYRE_PF}")

    before = registrations()
    node.restart_kubelet()
    poll_until(lambda: registrations() > before, "the plugin registers again", WAIT, 0.5)

    def ready_with_cards() -> bool:
        status = node.status()
        return status is not None and status.ready and allocatable(kubectl) == str(SHARED_CARDS)

    poll_until(ready_with_cards, "the node is Ready with its cards", WAIT, 0.5)
    wait_cards_free(node)
    apply(kubectl, card_pod("all", python_image, SHARED_CARDS))  # allocated by the new kubelet
    assert sorted(held(kubectl, "all")) == sorted(device_ids(SPYRE_PF, SHARED_CARDS))


def test_a_cpu_stand_in_model_holds_cards_like_a_card_model(
    operator_node: Node, kubectl: Kubectl, weights: Path
) -> None:
    wait_cards_free(operator_node)
    doc = node_operator.tiny_model("stand-in", cards=2)
    kubectl("apply", "-f", "-", input=json.dumps(doc))

    def ready() -> dict[str, Any] | None:
        status = kubectl.get("spyremodel/stand-in").get("status") or {}
        return status if status.get("phase") == "Ready" else None

    status = poll_until(ready, "the stand-in is Ready", MODEL_WAIT, 2.0)
    (serving,) = kubectl.get("pods", "-l", status["selector"])["items"]
    container = serving["spec"]["containers"][0]
    assert container["resources"]["limits"][SPYRE_PF] == "2"
    ids = kubectl("exec", serving["metadata"]["name"], "--", "printenv", ENV).strip().split(",")
    assert len(ids) == 2 and set(ids) <= set(device_ids(SPYRE_PF, SHARED_CARDS))
    assert cards_in_use(operator_node) == 2  # the compile Job held its 2 and is done
