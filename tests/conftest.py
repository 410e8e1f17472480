"""Fixtures on a REAL control plane: etcd + kube-apiserver + controller manager.

Shared by tests/integration and tests/chart: one control plane per test session (started
by the product's own `ControlPlane`, only when a test asks for it), a fresh namespace per
test. Binaries come from KUBEBUILDER_ASSETS or the cache that
`spyre-operator cluster install` fills (the README's test command runs it first).

Also, for every folder: a test's tier is its folder (tests/unit carries the unit marker,
...), and Hypothesis draws the same examples every run unless asked to explore.
"""

from __future__ import annotations

import random
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from kubernetes import client, config

from auditlib import audit_args, audit_log_path
from spyre_devcluster.controlplane import ControlPlane, Profile
from spyre_devcluster.tools import tool

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
TESTS = Path(__file__).parent
# The tiers: the folders under tests/, each a marker (pyproject.toml); scripts/test installs
# what the selected folders need.
TIERS = {folder.name for folder in TESTS.iterdir() if any(folder.glob("test_*.py"))}

# Hypothesis: the same examples every run (CI cannot fail on a new draw); on request,
# `--hypothesis-profile=explore` draws new ones from a seed said in the header and after a
# failure, to replay with `--hypothesis-seed=SEED`.
settings.register_profile("derandomized", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile("derandomized")


@pytest.hookimpl(tryfirst=True)  # before Hypothesis's plugin reads the seed
def pytest_configure(config: pytest.Config) -> None:
    if _exploring(config) and config.getoption("hypothesis_seed") is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))


def _exploring(config: pytest.Config) -> bool:
    return bool(config.getoption("hypothesis_profile") == "explore")


def _replay(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed")
    return f"--hypothesis-profile=explore --hypothesis-seed={seed}"


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"hypothesis exploring; replay with {_replay(config)}" if _exploring(config) else None


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if _exploring(config) and exitstatus == pytest.ExitCode.TESTS_FAILED:
        terminalreporter.write_line(f"hypothesis: replay this run with {_replay(config)}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's folder is its tier: the marker it carries (scripts/test installs by folder)."""
    wrong = []
    for item in items:
        if TESTS not in item.path.parents:
            continue
        folder = item.path.relative_to(TESTS).parts[0]
        tiers = {mark.name for mark in item.iter_markers()} & TIERS
        if tiers != {folder}:
            wrong.append(f"{item.nodeid}: marked {sorted(tiers)}, in tests/{folder}/")
    if wrong:
        raise pytest.UsageError(
            "each test carries exactly the marker of its folder under tests/ (move it or "
            "mark it):\n" + "\n".join(wrong)
        )


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    directory = tmp_path_factory.mktemp("control-plane")
    with ControlPlane(directory, Profile(apiserver_args=audit_args(directory / "audit"))) as plane:
        yield plane


@pytest.fixture(scope="session")
def audit_log(control_plane: ControlPlane) -> Path:
    """The API server's log of ServiceAccounts' requests (tests/auditlib.py)."""
    return audit_log_path(control_plane.dir / "audit")


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
