"""The platform's pod fields on the real API server: a SpyreModel with a ServiceAccount,
pull secrets, a PriorityClass, pod labels and annotations and a topology spread reaches
Ready, and every child carries them; the pods made from the Jobs' templates pass the API
server's admission (the ServiceAccount and the PriorityClass must exist: they do)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cluster_sim as sim
import pytest

from spyre_devcluster import simulate
from spyre_operator.api.validation import parse
from spyre_operator.kube.client import Kube
from spyre_operator.render import meta
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.integration

PRIORITY = 1000


@pytest.fixture
def priority_class(kube: Kube, namespace: str) -> Iterator[str]:
    """A PriorityClass of the test's own (cluster-scoped: removed afterwards)."""
    name = f"{namespace}-high"
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": PRIORITY,
    }
    kube.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
    yield name
    sim.ignore_missing(
        lambda: kube.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
    )


def test_a_model_with_every_platform_field_reaches_ready_and_its_pods_carry_them(
    kube: Kube, namespace: str, operator: sim.Operator, priority_class: str
) -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "models"}}
    kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    platform: dict[str, Any] = {
        "imagePullSecrets": [{"name": "icr-pull"}],
        "serviceAccountName": "models",
        "priorityClassName": priority_class,
        "podLabels": {"example.com/cost-center": "cc-42"},
        "podAnnotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
             "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    }  # fmt: skip
    doc = sim.model(namespace, "platform")
    doc["spec"] |= platform
    sim.create(kube, doc)

    # The weights and compile pods: made from the Jobs' templates, admitted by the server.
    sim.download(kube, doc)
    weights = kube.get("Job", namespace, weights_job_name(parse(doc).spec))
    job = sim.wait_for(
        lambda: kube.get("Job", namespace, sim.job_name(doc)), "the compile Job exists"
    )
    simulate.complete_job(kube, namespace, job["metadata"]["name"])
    deploy = sim.wait_for(lambda: kube.get("Deployment", namespace, "platform"), "the Deployment")
    simulate.make_deployment_available(kube, namespace, "platform")
    status = sim.wait_phase(kube, namespace, "platform", "Ready")
    assert status["readyReplicas"] == 1

    assert weights is not None
    for owner in (weights, job, deploy):
        template = owner["spec"]["template"]
        pod = template["spec"]
        kind = f"{owner['kind']} {owner['metadata']['name']}"
        assert pod["imagePullSecrets"] == [{"name": "icr-pull"}], kind
        assert (pod["serviceAccountName"], pod["priorityClassName"]) == (
            "models", priority_class
        ), kind  # fmt: skip
        assert pod["automountServiceAccountToken"] is False, kind
        assert template["metadata"]["labels"]["example.com/cost-center"] == "cc-42", kind
        annotations = template["metadata"]["annotations"]
        assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false", kind
    spread = deploy["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread == [platform["topologySpreadConstraints"][0] | {
        "labelSelector": {"matchLabels": meta.server_selector("platform")}
    }]  # fmt: skip
    # The Priority admission plugin resolved the class on the pods the Jobs' templates made.
    pods = kube.list("Pod", namespace, "example.com/cost-center=cc-42")
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        assert pod["spec"]["priority"] == PRIORITY
        assert pod["spec"]["serviceAccountName"] == "models"


def test_platform_fields_removed_from_the_spec_leave_the_deployment(
    kube: Kube, namespace: str, operator: sim.Operator, priority_class: str
) -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "models"}}
    kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    platform = {
        "serviceAccountName": "models",
        "priorityClassName": priority_class,
        "imagePullSecrets": [{"name": "icr-pull"}],
        "podLabels": {"example.com/team": "a"},
    }
    doc = sim.model(namespace, "gone")
    doc["spec"] |= platform
    sim.create(kube, doc)
    sim.download(kube, doc)
    job = sim.wait_for(
        lambda: kube.get("Job", namespace, sim.job_name(doc)), "the compile Job exists"
    )
    simulate.complete_job(kube, namespace, job["metadata"]["name"])
    sim.wait_for(lambda: kube.get("Deployment", namespace, "gone"), "the Deployment exists")

    sim.spec_patch(kube, namespace, "gone", dict.fromkeys(platform))

    def plain_template() -> dict[str, Any] | None:
        deploy = kube.get("Deployment", namespace, "gone")
        template: dict[str, Any] = (deploy or {})["spec"]["template"]
        return None if "example.com/team" in template["metadata"]["labels"] else template

    template = sim.wait_for(plain_template, "the Deployment lost the pod label")
    pod = template["spec"]
    assert "priorityClassName" not in pod and "imagePullSecrets" not in pod
    # not "models": the API server's mirror (serviceAccount) does not bring it back
    assert (pod["serviceAccountName"], pod["serviceAccount"]) == ("default", "default")
