"""Fixtures on a REAL control plane: etcd + kube-apiserver + controller manager.

Shared by tests/integration and tests/chart: one control plane per test session (started
by the product's own `ControlPlane`, only when a test asks for it), a fresh namespace per
test. Binaries come from KUBEBUILDER_ASSETS or the cache that
`spyre-operator cluster install` fills (the README's test command runs it first).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from spyre_devcluster.controlplane import ControlPlane
from spyre_devcluster.tools import tool

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"))
    plane.up()
    try:
        yield plane
    finally:
        plane.down()


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    """Run kubectl against the test control plane; returns the CompletedProcess."""

    def run(
        *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [tool("kubectl"), "--kubeconfig", str(kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    return run
