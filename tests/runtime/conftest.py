"""Fixtures for the runtime tests: per flavour, its cached venv and tiny models."""

from __future__ import annotations

import pytest
from rtlib import Runtime, installed_venv


@pytest.fixture(scope="session", params=["vllm-spyre", "sendnn-inference"])
def runtime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    flavour: str = request.param
    venv = installed_venv(flavour)
    models = tmp_path_factory.mktemp(f"models-{flavour}")
    logs = tmp_path_factory.mktemp(f"logs-{flavour}")
    rt = Runtime(flavour, venv, models, logs)
    # transformers lives in the flavour venv, so the models are made there.
    rt.python(
        rt.venv / "bin" / "spyre-runtime",
        "tiny-models",
        str(models),
        env=rt.env(models, {}),
        timeout=600,
    )
    return rt
