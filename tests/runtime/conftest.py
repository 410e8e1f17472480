"""Fixtures for the runtime tests: per flavour, its cached venv and tiny models."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from rtlib import REPO, Runtime


def _installed_venv(flavour: str) -> Path:
    done = subprocess.run(
        [str(REPO / "scripts" / "runtime-env"), "--installed", flavour],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(
            f"the {flavour} runtime env is missing; install it first with "
            f"`scripts/runtime-env {flavour}` (or `all`):\n{done.stderr}",
            pytrace=False,
        )
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session", params=["vllm-spyre", "sendnn-inference"])
def runtime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    flavour: str = request.param
    venv = _installed_venv(flavour)
    models = tmp_path_factory.mktemp(f"models-{flavour}")
    logs = tmp_path_factory.mktemp(f"logs-{flavour}")
    rt = Runtime(flavour, venv, models, logs)
    # transformers lives in the flavour venv, so the models are made there.
    rt.python(
        REPO / "tests" / "runtime" / "make_tiny_models.py",
        str(models),
        env=rt.env(models, {}),
        timeout=600,
    )
    return rt
