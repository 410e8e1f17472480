"""Which engine-core start method `serve` gives vLLM (enginefork.py); the runtime tier's
cached starts run through it (tests/runtime/test_runtime_cached_start.py)."""

from __future__ import annotations

import pytest

from spyre_runtime.contract import FLAVOURS
from spyre_runtime.enginefork import START_METHOD, start_method_env

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_a_cpu_backend_forks_and_the_card_backend_keeps_vllms_spawn(flavour: str) -> None:
    backend = FLAVOURS[flavour].env("DYNAMO_BACKEND")
    for cpu in ("eager", "inductor"):
        assert start_method_env(FLAVOURS[flavour], {backend: cpu}) == {START_METHOD: "fork"}
    assert start_method_env(FLAVOURS[flavour], {backend: "sendnn"}) == {}
    assert start_method_env(FLAVOURS[flavour], {}) == {}  # the plugin's default: sendnn


def test_a_start_method_in_the_pods_env_is_kept() -> None:
    flavour = FLAVOURS["sendnn-inference"]
    env = {flavour.env("DYNAMO_BACKEND"): "eager", START_METHOD: "spawn"}
    assert start_method_env(flavour, env) == {}
