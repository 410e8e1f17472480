"""Stories on a node whose 8 fake cards are full: a CPU stand-in model of 4 cards x 2
replicas (the operator counts it as a card model) served from the chart-installed
operator. One more replica than the cards allow says why it waits within a minute; a drain
takes one replica at a time (the PodDisruptionBudget); a spec change that needs a new cache
key compiles on the cards of one replica while the other serves, then rolls to the new
key one replica at a time, the cards the serving pods ask for never above 8, the requests
answered throughout."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nodelib import Kubectl, Requests, SharedNode

from spyre_devcluster import node_operator
from spyre_devcluster.kubectl import KubectlError
from spyre_devcluster.node_config import NODE_NAME, SPYRE_PF
from spyre_devcluster.simulate import poll_until

pytestmark = pytest.mark.node

NAME = "tp4"
CARDS, REPLICAS = 4, 2  # 8: every card of the node
WAIT = 1500  # a compile plus serving starts, on a loaded 2-core machine
ENDED = ("Succeeded", "Failed")


@dataclass
class Cards:
    """The cards of the model's pods, sampled while a change goes on, three ways
    (docs/operator.md, "Cards"): `held`, the requests of its pods bound to the node and not
    ended (what the kubelet allocated: a pod waiting for cards holds none); `serving`, the
    requests of the Deployment's replicas, its serving pods not terminating, bound or not
    (a surge pod would ask for cards beyond the node's); `asked`, those of all its pods
    not ended, bound or not, terminating or not (a compile pod waiting for the hand-off, a
    new replica waiting for the cards of a terminating one)."""

    kubectl: Kubectl
    held: list[int] = field(default_factory=list)
    serving: list[int] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)

    def sample(self) -> None:
        # One list, one moment: two lists a second apart once saw a replica that had
        # since ended beside the compile pod bound in its place (12 cards of 8 "held").
        pods = self.kubectl.get("pods")["items"]
        served = [p for p in pods if _label(p, "serving.spyre.dev/model") == NAME]
        compiles = [p for p in pods if _label(p, "app.kubernetes.io/component") == "compile"]
        live = [p for p in served + compiles if p["status"].get("phase") not in ENDED]
        self.held.append(sum(cards(p) for p in live if p["spec"].get("nodeName")))
        replicas = [p for p in live if p in served and not p["metadata"].get("deletionTimestamp")]
        self.serving.append(sum(cards(p) for p in replicas))
        self.asked.append(sum(cards(p) for p in live))
        self.replicas.append(self.kubectl.get(f"deployment/{NAME}")["spec"]["replicas"])


def _label(pod: dict[str, Any], key: str) -> str | None:
    labels: dict[str, str] = pod["metadata"].get("labels") or {}
    return labels.get(key)


def cards(pod: dict[str, Any]) -> int:
    """The cards a pod requests."""
    return sum(
        int(c.get("resources", {}).get("requests", {}).get(SPYRE_PF, "0"))
        for c in pod["spec"]["containers"]
    )


@pytest.fixture(scope="module")
def kubectl(shared_node: SharedNode, models: Path) -> Iterator[Kubectl]:
    """The chart-installed operator, its node's 8 cards all held by the model."""
    node = shared_node.with_operator()
    namespace = f"cards-{uuid.uuid4().hex[:8]}"
    kubectl = node_operator.make_namespace(node, namespace, models)
    doc = node_operator.tiny_model(NAME, cards=CARDS)
    doc["spec"]["replicas"] = REPLICAS
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    ready(kubectl, REPLICAS)
    yield kubectl
    Kubectl(node.kubeconfig, "default")("uncordon", NODE_NAME)
    node_operator.delete_namespace(node, namespace)


def status(kubectl: Kubectl) -> dict[str, Any]:
    return kubectl.get(f"spyremodel/{NAME}").get("status") or {}


def condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == kind), {})


def ready(kubectl: Kubectl, replicas: int, key: str | None = None) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        st = status(kubectl)
        done = condition(st, "Ready").get("status") == "True"
        done = done and st.get("readyReplicas") == replicas
        return st if done and (key is None or st.get("activeCacheKey") == key) else None

    found: dict[str, Any] = poll_until(probe, f"{NAME} Ready with {replicas}", WAIT, 2.0)
    return found


def test_a_replica_the_cards_cannot_hold_says_why_within_a_minute(kubectl: Kubectl) -> None:
    kubectl("scale", f"spyremodel/{NAME}", "--replicas=3")  # as an autoscaler would
    asked = time.monotonic()

    def says() -> dict[str, Any] | None:
        cond = condition(status(kubectl), "Ready")
        return cond if cond.get("reason") == "Unschedulable" else None

    cond = poll_until(says, "Ready reason Unschedulable", 60, 1.0)
    took = time.monotonic() - asked
    print(f"Unschedulable in status {took:.1f} s after the scale: {cond['message']}")
    assert f"Insufficient {SPYRE_PF}" in cond["message"]
    assert cond["message"].startswith(f"{REPLICAS}/3 replicas ready; 1 waits for a node")
    assert status(kubectl)["phase"] == "Ready"  # it serves, with 2 of 3
    assert status(kubectl)["unschedulableReplicas"] == 1  # the Unschedulable column
    kubectl("scale", f"spyremodel/{NAME}", f"--replicas={REPLICAS}")
    ready(kubectl, REPLICAS)


def test_a_drain_takes_one_replica_at_a_time(kubectl: Kubectl) -> None:
    budget = kubectl.get(f"poddisruptionbudget/{NAME}")
    assert budget["spec"]["maxUnavailable"] == 1
    before = {p["metadata"]["name"] for p in serving(kubectl)}
    assert len(before) == REPLICAS
    with pytest.raises(KubectlError) as refused:  # the node is cordoned: nothing comes back
        kubectl(
            "drain", NODE_NAME, f"--pod-selector=serving.spyre.dev/model={NAME}",
            "--delete-emptydir-data", "--ignore-daemonsets", "--timeout=60s",
            timeout=180,
        )  # fmt: skip
    print(str(refused.value)[-600:])
    assert "disruption budget" in str(refused.value)
    running = {
        p["metadata"]["name"] for p in serving(kubectl) if p["status"].get("phase") == "Running"
    }
    assert len(running & before) == REPLICAS - 1  # one evicted, the other kept
    kubectl("uncordon", NODE_NAME)
    ready(kubectl, REPLICAS)


def serving(kubectl: Kubectl) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.get("pods", "-l", f"serving.spyre.dev/model={NAME}")[
        "items"
    ]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def test_a_new_key_compiles_on_the_cards_of_one_replica_and_rolls_while_it_serves(
    kubectl: Kubectl,
) -> None:
    old = status(kubectl)["activeCacheKey"]
    svc = kubectl.get(f"service/{NAME}")["spec"]
    requests = Requests(svc["clusterIP"], svc["ports"][0]["port"])
    requests.start()
    cards = Cards(kubectl)
    patch = {"spec": {"batching": {"continuous": {"maxNumSeqs": 3}}}}  # a new cache key
    kubectl("patch", f"spyremodel/{NAME}", "--type=merge", "-p", json.dumps(patch))

    def rolled() -> dict[str, Any] | None:
        cards.sample()
        st = status(kubectl)
        new = st.get("targetCacheKey") not in (None, old)
        done = new and st.get("activeCacheKey") == st.get("targetCacheKey")
        done = done and condition(st, "Ready").get("status") == "True"
        return st if done and st.get("readyReplicas") == REPLICAS else None

    st = poll_until(rolled, "Ready on the new key with 2 replicas", WAIT, 1.0)
    ok, failed = requests.stop()
    said = " ".join(e["message"] for e in kubectl.get("events")["items"])
    print(f"cards in {len(cards.held)} samples during the change: held max {max(cards.held)}, "
          f"asked by the serving pods max {max(cards.serving)}, asked by all max "
          f"{max(cards.asked)}; Deployment replicas {sorted(set(cards.replicas))}; waited "
          f"for cards {st['cache'].get('pendingSeconds')} s; requests answered {ok}, "
          f"failed {failed}")  # fmt: skip
    assert st["activeCacheKey"] != old
    # the compile took the cards of one replica: the Deployment went to 1, then back to 2
    assert min(cards.replicas) == 1 and cards.replicas[-1] == REPLICAS
    assert "takes the cards of the others until it is done" in said
    # the replicas never asked for more than the node's cards: no surge pod, in the
    # hand-off or the rollout; 4 more were asked for by the compile pod while it waited
    # for the hand-off, and by a new replica while the one it replaces was terminating
    assert max(cards.serving) <= 2 * CARDS and max(cards.held) <= 2 * CARDS
    assert max(cards.asked) <= 2 * CARDS + CARDS
    assert st["cache"]["pendingSeconds"] > 0  # it waited for the hand-off, not counted
    assert ok > 0 and failed == 0  # one replica served throughout (docs/operator.md, Cards)
