"""spec.routing against the API server with the real CRDs from their Go modules: the
inference extension's InferencePool (sigs.k8s.io/gateway-api-inference-extension, the
release whose cmd/epp is the picker image's) and the Gateway API's standard Gateway and
HTTPRoute (sigs.k8s.io/gateway-api). No gateway controller or picker runs here: the test
writes what they would (the picker's Deployment available, the Gateway's acceptance).

The pool selects the serving pods on vLLM's port through the picker; the picker's objects
are the pool's (the garbage collector takes them with it); the route goes from the named
Gateway to the pool; without the CRDs, or with a Gateway that does not exist, the Routing
condition says so; all of it goes with spec.routing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chart_identity
import cluster_sim as sim
import module_crds
import pytest

from spyre_devcluster import simulate
from spyre_operator.kube.client import Kube

pytestmark = pytest.mark.integration

# The last release of the inference extension with its full endpoint picker (cmd/epp;
# later ones moved it to llm-d's router), and the Gateway API release cert-manager's
# module (gomod/cert-manager) already brings into the module cache.
INFERENCE = "sigs.k8s.io/gateway-api-inference-extension@v1.5.0"
GATEWAY_API = "sigs.k8s.io/gateway-api@v1.6.0"
POOL_CRD = ("inferencepools.inference.networking.k8s.io", INFERENCE, "config/crd/bases")
GATEWAY_CRDS = [
    (f"{plural}.gateway.networking.k8s.io", GATEWAY_API, "config/crd/standard")
    for plural in ("gateways", "httproutes")
]
PICKER = "m-epp"


def crd(name: str, module: str, folder: str) -> dict[str, Any]:
    group = name.split(".", 1)[1]
    return module_crds.module_crd(module, f"{folder}/{group}_{name.split('.')[0]}.yaml")


@pytest.fixture
def without_crds(kube: Kube) -> None:
    for name, *_ in (POOL_CRD, *GATEWAY_CRDS):
        module_crds.remove(kube, name)


@pytest.fixture
def with_crds(kube: Kube) -> Iterator[None]:
    for each in (POOL_CRD, *GATEWAY_CRDS):
        module_crds.install(kube, crd(*each))
    yield
    for name, *_ in (POOL_CRD, *GATEWAY_CRDS):
        module_crds.remove(kube, name)


def picker_role() -> str:
    (name,) = (
        d["metadata"]["name"]
        for d in chart_identity.rendered()
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-endpoint-picker")
    )
    return name


def flags() -> tuple[str, ...]:
    return ("--picker-image", "epp:test", "--picker-cluster-role", picker_role())


def routed_model(namespace: str, gateway: str) -> dict[str, Any]:
    doc = sim.model(namespace, "m")
    doc["spec"]["routing"] = {"gateway": {"name": gateway}}
    return doc


def routing(kube: Kube, namespace: str, reason: str) -> dict[str, Any] | None:
    st = sim.status(kube, namespace, "m")
    return st if sim.condition(st, "Routing")[1] == reason else None


def gateway(kube: Kube, namespace: str, name: str) -> None:
    spec = {
        "gatewayClassName": "example",
        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
    }
    doc = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    kube.request("POST", kube.path("Gateway", namespace), doc)


def test_without_the_crds_the_condition_says_to_install_them(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path, without_crds: None
) -> None:
    with sim.running_operator(kubeconfig, namespace, tmp_path / "op.log", 300, *flags()):
        sim.to_ready(kube, routed_model(namespace, "gw"))
        st = sim.wait_for(lambda: routing(kube, namespace, "InferencePoolNotInstalled"), "why")
    status, _, message = sim.condition(st, "Routing")
    assert status == "False" and "inferencepools.inference.networking.k8s.io" in message
    assert st["phase"] == "Ready"  # served through its Service meanwhile


def test_the_pool_picker_and_route_are_made_reported_and_go_with_the_spec(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path, with_crds: None
) -> None:
    gateway(kube, namespace, "gw")
    with sim.running_operator(kubeconfig, namespace, tmp_path / "op.log", 3, *flags()):
        sim.to_ready(kube, routed_model(namespace, "gw"))
        pool = sim.wait_for(lambda: kube.get("InferencePool", namespace, "m"), "the pool")
        assert pool["spec"]["selector"]["matchLabels"] == {
            "serving.spyre.dev/model": "m",
            "app.kubernetes.io/component": "server",
        }
        assert pool["spec"]["targetPorts"] == [{"number": 8000}]
        assert pool["spec"]["endpointPickerRef"]["name"] == PICKER
        deploy = sim.wait_for(lambda: kube.get("Deployment", namespace, PICKER), "the picker")
        for kind in ("ServiceAccount", "RoleBinding", "Service", "Deployment"):
            made = kube.get(kind, namespace, PICKER)  # applied before the Deployment
            assert made is not None, kind
            assert made["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
        binding = kube.get("RoleBinding", namespace, PICKER)
        assert binding is not None and binding["roleRef"]["name"] == picker_role()
        (container,) = deploy["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "epp:test"
        route = sim.wait_for(lambda: kube.get("HTTPRoute", namespace, "m"), "the route")
        assert route["spec"]["parentRefs"][0]["name"] == "gw"
        (rule,) = route["spec"]["rules"]
        assert rule["backendRefs"][0]["kind"] == "InferencePool"
        sim.wait_for(lambda: routing(kube, namespace, "PickerNotReady"), "the picker waited for")
        simulate.make_deployment_available(kube, namespace, PICKER)
        sim.wait_for(lambda: routing(kube, namespace, "WaitingForGateway"), "the gateway")
        # the Gateway's controller accepts the route
        accepted = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": ""}
        parent = {
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
            "controllerName": "example.com/gateway",
            "conditions": [accepted | {"lastTransitionTime": "2026-11-28T00:00:00Z"}],
        }
        kube.request(
            "PATCH",
            kube.path("HTTPRoute", namespace, "m", sub="status"),
            {"status": {"parents": [parent]}},
            content_type="application/merge-patch+json",
        )
        st = sim.wait_for(lambda: routing(kube, namespace, "Routed"), "routed")
        assert st["routing"] == {
            "inferencePool": "m",
            "endpointPicker": PICKER,
            "httpRoute": "m",
        }
        # routing removed: the pool, its picker and the route go
        sim.spec_patch(kube, namespace, "m", {"routing": None})
        sim.wait_for(lambda: kube.get("InferencePool", namespace, "m") is None or None, "no pool")
        sim.wait_for(lambda: kube.get("HTTPRoute", namespace, "m") is None or None, "no route")
        sim.wait_for(lambda: kube.get("Deployment", namespace, PICKER) is None or None, "no picker")
        sim.wait_for(
            lambda: "routing" not in sim.status(kube, namespace, "m") or None, "no status.routing"
        )
        assert sim.condition(sim.status(kube, namespace, "m"), "Routing")[0] == ""


def test_a_gateway_that_does_not_exist_is_reported(
    kube: Kube, kubeconfig: Path, namespace: str, tmp_path: Path, with_crds: None
) -> None:
    with sim.running_operator(kubeconfig, namespace, tmp_path / "op.log", 300, *flags()):
        sim.to_ready(kube, routed_model(namespace, "nope"))
        st = sim.wait_for(lambda: routing(kube, namespace, "GatewayNotFound"), "the reason")
    status, _, message = sim.condition(st, "Routing")
    assert status == "False" and f"Gateway {namespace}/nope does not exist" in message
