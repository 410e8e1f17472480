"""spec.autoscaling against the API server with KEDA's own ScaledObject CRD (from KEDA's Go
module, github.com/kedacore/keda/v2: its config/crd/bases, the go command's module cache
being the install cache; no KEDA runs here, the test writes what its HPA would): the
ScaledObject scales the SpyreModel on vLLM's metric of its pods, within the replicas a
node's cards hold (status.autoscaling), and goes with spec.autoscaling; without the CRD
the condition says to install KEDA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_sim as sim
import module_crds
import pytest

from spyre_operator.kube.client import Kube
from spyre_operator.render.autoscaler import query

pytestmark = pytest.mark.integration

# KEDA's module at the release the node's KEDA is built from (gomod/keda's go.mod).
KEDA = "github.com/kedacore/keda/v2@v2.21.0"
CRD = "scaledobjects.keda.sh"
PROMETHEUS = "http://prometheus.monitoring.svc:9090"
RESOURCE = "ibm.com/spyre_pf"


def keda_crd() -> dict[str, Any]:
    """KEDA's ScaledObject CRD, as its module ships it."""
    return module_crds.module_crd(KEDA, f"config/crd/bases/keda.sh_{CRD.split('.')[0]}.yaml")


@pytest.fixture
def without_keda(kube: Kube) -> None:
    module_crds.remove(kube, CRD)


@pytest.fixture
def with_keda(kube: Kube) -> Iterator[None]:
    module_crds.install(kube, keda_crd())
    yield
    module_crds.remove(kube, CRD)


@pytest.fixture
def card_node(kube: Kube, namespace: str) -> Iterator[str]:
    """A Ready node with 4 cards for pods (what a kubelet with the device plugin says)."""
    name = f"cards-{namespace}"
    kube.request("POST", "/api/v1/nodes", {"metadata": {"name": name}})
    status = {
        "allocatable": {RESOURCE: "4", "cpu": "16", "memory": "64Gi", "pods": "110"},
        "capacity": {RESOURCE: "4", "cpu": "16", "memory": "64Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
    # the not-ready taint the API server gives a new node goes once it is Ready (the node
    # lifecycle controller's work, which this control plane does not run)
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"spec": {"taints": None}},
        content_type="application/merge-patch+json",
    )
    yield name
    kube.request("DELETE", f"/api/v1/nodes/{name}")


def scaled_model(namespace: str) -> dict[str, Any]:
    doc = sim.model(namespace, "m")
    doc["spec"]["accelerator"] = {"count": 2}  # CPU pods holding 2 cards each
    doc["spec"]["autoscaling"] = {"maxReplicas": 4, "target": {"waitingRequests": 3}}
    return doc


def scaled_object(kube: Kube, namespace: str) -> dict[str, Any] | None:
    return kube.get("ScaledObject", namespace, "m")


def autoscaling(kube: Kube, namespace: str, reason: str) -> dict[str, Any] | None:
    st = sim.status(kube, namespace, "m")
    return st if sim.condition(st, "Autoscaling")[1] == reason else None


def test_without_keda_the_condition_says_to_install_it(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path, without_keda: None
) -> None:
    flags = ("--prometheus-address", PROMETHEUS)
    with sim.running_operator(kubeconfig, namespace, tmp_path / "op.log", 300, *flags):
        sim.to_ready(kube, scaled_model(namespace))
        st = sim.wait_for(lambda: autoscaling(kube, namespace, "EngineNotInstalled"), "the reason")
    status, _, message = sim.condition(st, "Autoscaling")
    assert status == "False" and CRD in message and "install KEDA" in message
    assert st["phase"] == "Ready"  # it serves at spec.replicas meanwhile


def test_the_scaled_object_scales_the_model_within_the_cards_and_goes_with_the_spec(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    with_keda: None,
    card_node: str,
) -> None:
    flags = ("--prometheus-address", PROMETHEUS)
    with sim.running_operator(kubeconfig, namespace, tmp_path / "op.log", 3, *flags):
        sim.to_ready(kube, scaled_model(namespace))
        # the node holds 2 replicas of 2 cards: the autoscaler gets 2, not 4
        st = sim.wait_for(lambda: autoscaling(kube, namespace, "LimitedByCards"), "the cards")
        made = sim.wait_for(
            lambda: (
                (s := scaled_object(kube, namespace)) and s["spec"]["maxReplicaCount"] == 2 and s
            ),
            "the ScaledObject at the cards' maximum",
        )
        assert st["autoscaling"] == {
            "scaledObject": "m",
            "minReplicas": 1,
            "maxReplicas": 2,
            "cardsPerReplica": 2,
            "replicasOnNodes": 2,
            "replicasNow": 2,
        }
        spec = made["spec"]
        assert spec["scaleTargetRef"] == {
            "apiVersion": "serving.spyre.dev/v1alpha1",
            "kind": "SpyreModel",
            "name": "m",
        }
        assert made["metadata"]["ownerReferences"][0]["name"] == "m"
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "prometheus"
        assert trigger["metadata"] == {
            "serverAddress": PROMETHEUS,
            "query": query("waitingRequests", namespace, "m"),
            "threshold": "3",
        }
        # KEDA's HPA scales the SpyreModel (its scale subresource): the Deployment follows
        kube.patch("SpyreModel", namespace, "m", {"spec": {"replicas": 2}}, sub="scale")
        sim.wait_for(
            lambda: kube.get("Deployment", namespace, "m")["spec"]["replicas"] == 2 or None,
            "the Deployment at 2 replicas",
        )
        # autoscaling removed: its ScaledObject and status go
        sim.spec_patch(kube, namespace, "m", {"autoscaling": None})
        sim.wait_for(lambda: scaled_object(kube, namespace) is None or None, "no ScaledObject")
        sim.wait_for(
            lambda: "autoscaling" not in sim.status(kube, namespace, "m") or None,
            "no status.autoscaling",
        )
        assert sim.condition(sim.status(kube, namespace, "m"), "Autoscaling")[0] == ""
