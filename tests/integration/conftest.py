"""Fixtures of the operator integration tests (the control plane and a fresh namespace
come from tests/conftest.py; the helpers they use are in cluster_sim)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_sim import Operator, kube_for, running_operator

from spyre_operator.kube.client import Kube


@pytest.fixture
def kube(kubeconfig: Path) -> Kube:
    return kube_for(kubeconfig)


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    """`spyre-operator run` for the test's namespace; its log printed if the test fails."""
    with running_operator(kubeconfig, namespace, tmp_path / "operator.log") as running:
        yield running
