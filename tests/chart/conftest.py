"""Fixtures of the chart tests (the control plane itself comes from tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from chartlib import CHART_CRDS, Kubectl
from kubernetes import client

# The smallest CRDs that let the API server accept Prometheus Operator and cert-manager
# objects in a server-side dry run: the real schema is not what the chart tests check.
MONITORING_KINDS = {
    "PodMonitor": "podmonitors",
    "ServiceMonitor": "servicemonitors",
    "PrometheusRule": "prometheusrules",
}
CERT_MANAGER_KINDS = {"Certificate": "certificates", "Issuer": "issuers"}


def _crd(kind: str, plural: str, group: str = "monitoring.coreos.com") -> str:
    return f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {kind.lower()}}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"""


def _wait_established(kubectl: Kubectl, crd: str) -> None:
    kubectl("wait", "--for=condition=Established", "--timeout=120s", f"crd/{crd}")


@pytest.fixture(scope="session")
def spyremodel_crd(kubectl: Kubectl) -> str:
    """The chart's CRDs, installed the way docs/install.md says (server-side apply)."""
    kubectl("apply", "--server-side", "-f", str(CHART_CRDS))
    _wait_established(kubectl, "spyrecaches.serving.spyre.dev")
    _wait_established(kubectl, "spyremodels.serving.spyre.dev")
    return "spyremodels.serving.spyre.dev"


@pytest.fixture(scope="session")
def monitoring_crds(kubectl: Kubectl) -> None:
    docs = "---".join(_crd(kind, plural) for kind, plural in MONITORING_KINDS.items())
    kubectl("apply", "-f", "-", input=docs)
    for plural in MONITORING_KINDS.values():
        _wait_established(kubectl, f"{plural}.monitoring.coreos.com")


@pytest.fixture(scope="session")
def cert_manager_crds(kubectl: Kubectl) -> None:
    crds = [_crd(kind, plural, "cert-manager.io") for kind, plural in CERT_MANAGER_KINDS.items()]
    kubectl("apply", "-f", "-", input="---".join(crds))
    for plural in CERT_MANAGER_KINDS.values():
        _wait_established(kubectl, f"{plural}.cert-manager.io")


NamespaceFactory = Callable[[], str]


@pytest.fixture
def make_namespace(api_client: client.ApiClient) -> Iterator[NamespaceFactory]:
    """Extra namespaces for one test (e.g. the watched list), deleted afterwards."""
    core = client.CoreV1Api(api_client)
    made: list[str] = []

    def make() -> str:
        name = f"w-{uuid.uuid4().hex[:10]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)
