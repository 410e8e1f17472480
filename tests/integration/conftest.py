"""Fixtures of the operator integration tests (the control plane and a fresh namespace
come from tests/conftest.py; the helpers they use are in cluster_sim).

The operator runs as the chart's ServiceAccount (cluster_sim.Operator): after each test the
API server's audit log says what it called, a refused call fails the test, and the calls
of the whole tier must be the ones tests/operator-calls.yaml lists (tests/auditlib.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import chart_identity
import pytest
from cluster_sim import Operator, kube_for, running_operator

from auditlib import NO_CALLS, RECORD, RECORD_ENV, AuditLog, Calls, load_record, summarize
from spyre_operator.kube.client import Kube

HERE = Path(__file__).parent
_deselected: list[pytest.Item] = []


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected.extend(items)


@pytest.fixture
def kube(kubeconfig: Path) -> Kube:
    return kube_for(kubeconfig)


@pytest.fixture
def operator(kubeconfig: Path, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    """`spyre-operator run` for the test's namespace; its log printed if the test fails."""
    with running_operator(kubeconfig, namespace, tmp_path / "operator.log") as running:
        yield running


def _whole_tier(session: pytest.Session) -> bool:
    """Every integration test ran (the record is checked both ways only then)."""
    ran = {item.path for item in session.items}
    files = set(HERE.glob("test_*.py"))
    picked = any("::" in arg for arg in session.config.args)
    dropped = any(HERE in item.path.parents for item in _deselected)
    return files <= ran and not picked and not dropped


@pytest.fixture(scope="session")
def operator_calls(request: pytest.FixtureRequest) -> Iterator[list[Calls]]:
    """The calls the operator made in this session (one Calls, replaced as they add up)."""
    made = [NO_CALLS]
    yield made
    session = request.session
    if not _whole_tier(session) or session.testsfailed:
        return
    if os.environ.get(RECORD_ENV) == "1":
        RECORD.write_text(made[0].as_text())
        return
    record = load_record()
    stale = (record.namespaced - made[0].namespaced) | (record.cluster - made[0].cluster)
    assert not stale, (
        f"{RECORD.name} lists calls the operator no longer made in the integration tier: "
        f"{sorted(map(str, stale))}; rewrite it with {RECORD_ENV}=1 (its header says how) "
        "and drop the grants from the chart (templates/_rbac.tpl)"
    )


@pytest.fixture(autouse=True)
def the_chart_grants_every_call(
    request: pytest.FixtureRequest, operator_calls: list[Calls]
) -> Iterator[None]:
    """No request of the operator's refused as forbidden; each call in the record."""
    if "control_plane" not in request.fixturenames:
        yield
        return
    log = AuditLog(request.getfixturevalue("audit_log"), chart_identity.user())
    yield
    made, refused = summarize(log.read())
    operator_calls[0] |= made
    assert not refused, (
        "the API server refused the operator (as the chart's ServiceAccount); grant the "
        "call in charts/spyre-operator/templates/_rbac.tpl or do without it:\n" + "\n".join(refused)
    )
    if os.environ.get(RECORD_ENV) == "1":
        return
    record = load_record()
    new = (made.namespaced - record.namespaced) | (made.cluster - record.cluster)
    assert not new, (
        f"the operator made calls {RECORD.name} does not list: {sorted(map(str, new))}; "
        f"rewrite it with {RECORD_ENV}=1 (its header says how)"
    )
