"""`spyre-operator support-bundle` on the real API server, after a model whose compile
failed: everything a bug report needs is in the tar.gz (versions, the model with its
status, its Events, the Jobs and pods the operator made, the operator's pods), what could
not be read is listed (no kubelet here: no pod log), and no Secret's data or credential
env value is anywhere in it."""

from __future__ import annotations

import tarfile
import uuid
from pathlib import Path

import cluster_sim as sim
import pytest
import yaml

from spyre_devcluster import simulate
from spyre_operator.cli import main

pytestmark = pytest.mark.integration

HUB_TOKEN = f"hub-{uuid.uuid4().hex}"  # a Secret's value: never in the bundle
ENV_TOKEN = f"env-{uuid.uuid4().hex}"  # a credential in spec.env: replaced


def test_a_bundle_after_a_failed_compile_has_what_a_report_needs_and_no_secret(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    kube = sim.kube_for(kubeconfig)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "hub", "namespace": namespace},
        "stringData": {"token": HUB_TOKEN},
    }
    kube.request("POST", f"/api/v1/namespaces/{namespace}/secrets", secret)
    env = [
        {"name": "MY_HUB_TOKEN", "value": ENV_TOKEN},
        {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
    ]
    doc = sim.model(namespace, "broken", sim.example(env=env))
    # the operator's pod, as the chart labels it, in "its" namespace (this test's)
    operator_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "spyre-operator-0",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "spyre-operator"},
        },
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "operator", "image": "operator:test"}],
        },
    }
    simulate.ensure_service_account(kube, namespace)
    kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", operator_pod)
    with sim.running_operator(kubeconfig, namespace, tmp_path / "operator.log"):
        sim.create(kube, doc)
        job = sim.compile_job(kube, sim.get(kube, namespace, "broken"))
        simulate.finish_job(kube, namespace, job, exit_code=1, reason="Error", message="boom")
        sim.wait_phase(kube, namespace, "broken", "Failed")

    out = tmp_path / "bundle.tar.gz"
    args = [
        "support-bundle",
        "--kubeconfig",
        str(kubeconfig),
        "-n",
        namespace,
        "--operator-namespace",
        namespace,
        "--output",
        str(out),
    ]
    assert main(args) == 0
    with tarfile.open(out) as tar:
        files = {
            m.name.removeprefix("support-bundle/"): tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    everything = "\n".join(files.values())
    assert HUB_TOKEN not in everything and ENV_TOKEN not in everything
    assert "<redacted by support-bundle>" in everything and "VLLM_LOGGING_LEVEL" in everything

    versions = yaml.safe_load(files["versions.yaml"])
    assert versions["apiServer"]["gitVersion"].startswith("v")
    assert versions["crd/spyremodels"]["served"] == ["v1alpha1"]
    (broken,) = yaml.safe_load(files[f"{namespace}/spyremodels.yaml"])
    assert broken["status"]["phase"] == "Failed"
    reasons = {e["reason"] for e in yaml.safe_load(files[f"{namespace}/events.yaml"])}
    assert reasons, "the model's Events"
    jobs = {j["metadata"]["name"] for j in yaml.safe_load(files[f"{namespace}/jobs.yaml"])}
    assert job in jobs
    pods = yaml.safe_load(files[f"{namespace}/pods.yaml"])
    assert pods and all(
        p["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "spyre-operator" for p in pods
    )
    (listed,) = yaml.safe_load(files[f"operator/{namespace}/pods.yaml"])
    assert listed["metadata"]["name"] == "spyre-operator-0"
    # every pod's log is in it, or said to be unreadable (a pod no kubelet runs)
    errors = files.get("errors.txt", "")
    for pod in [*pods, listed]:
        name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
        folder = "operator/" if pod is listed else ""
        logged = f"{folder}{namespace}/logs/{name}.{container}.log" in files
        assert logged or f"the log of {namespace}/{name} ({container})" in errors, name
