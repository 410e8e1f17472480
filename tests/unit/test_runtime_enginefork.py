"""Which engine-core start method `serve` gives vLLM (enginefork.py); the runtime tier's
cached starts run through it (tests/runtime/test_runtime_cached_start.py)."""

from __future__ import annotations

import os
import subprocess
import sys

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


FORKED = """
import gc, os, sys
from spyre_runtime.enginefork import prepare_forks

def frozen_in_a_child():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, str(gc.get_freeze_count()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    return int(os.read(read, 64))

prepare_forks()
child = frozen_in_a_child()
grandchild = os.fork()  # the hook is inherited: a child forking freezes nothing
if grandchild == 0:
    gc.unfreeze()
    os._exit(0 if frozen_in_a_child() == 0 else 1)
_, status = os.waitpid(grandchild, 0)
print(child, gc.get_freeze_count() == child, os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("method", ["fork", None])
def test_the_api_server_freezes_its_heap_before_forking_the_engine_core(
    method: str | None,
) -> None:
    """What vLLM's freeze_gc_heap then skips in both processes; only with fork set by
    serve, and only in the process that loaded the plugin."""
    env = {k: v for k, v in os.environ.items() if k != START_METHOD}
    if method:
        env[START_METHOD] = method
    done = subprocess.run(
        [sys.executable, "-c", FORKED], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    frozen, parent_too, grandchild = done.stdout.split()
    assert (int(frozen) > 1000) == (method == "fork"), done.stdout
    assert parent_too == "True"
    assert grandchild == "0"
