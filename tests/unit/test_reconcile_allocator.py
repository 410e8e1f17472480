"""The operator's C allocator arenas (reconcile/allocator.py), counted by glibc itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

THREADS = """
import ctypes, sys, threading
from spyre_operator.reconcile.allocator import limit_arenas
print(limit_arenas() if sys.argv[1] == "limit" else None, flush=True)
blocks, together = [], threading.Barrier(8)
def allocate():  # every thread alive at once (an exited thread's arena is reused)
    together.wait()
    blocks.append(bytearray(100_000))
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()  # per arena, to stderr
"""


def arenas(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", THREADS, mode], capture_output=True, text=True, env=environ
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr.count("Arena ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_two_arenas_where_each_thread_would_have_its_own() -> None:
    said, count = arenas("none")
    assert count > 2  # the test can see the difference: a thread, an arena
    said, count = arenas("limit")
    assert said == "True" and count <= 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_environment_wins() -> None:
    said, count = arenas("limit", MALLOC_ARENA_MAX="4")
    assert said == "False" and 2 < count <= 4
