"""Fixtures for the runtime tests: per flavour, its cached venv and tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rtlib import (
    ENGINE_TIMEOUT,
    Runtime,
    Workload,
    installed_venv,
    stop,
    wait_for_server,
)

from spyre_devcluster.controlplane import free_port


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


@pytest.fixture
def server(runtime: Runtime) -> Any:
    """start(workload, root, require_precompiled) -> (port, log): `spyre-runtime serve`,
    up and answering; stopped after the test."""
    started: list[Any] = []

    def start(workload: Workload, root: Path, require_precompiled: bool) -> tuple[int, Path]:
        port = free_port()
        name = f"serve-{workload.name}-{port}"
        env = workload.env(runtime, root, require_precompiled=require_precompiled)
        proc = runtime.start(name, ["serve", *workload.args, "--port", str(port)], env)
        started.append(proc)
        log = runtime.logs / f"{name}.log"
        wait_for_server(proc, port, log, timeout=ENGINE_TIMEOUT)
        return port, log

    yield start
    for proc in started:
        stop(proc)
