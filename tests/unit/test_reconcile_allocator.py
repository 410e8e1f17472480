"""The operator's C allocator arenas (controller/allocator.py), counted by glibc itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

THREADS = """
import ctypes, os, sys, threading
from spyre_operator.settings import from_env
from spyre_operator.controller.allocator import limit_arenas
told = from_env(os.environ).malloc_arena_max  # as `run` reads it
print(limit_arenas(told=told) if sys.argv[1] == "limit" else None, flush=True)
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


HOLES = """
import sys
from spyre_operator.controller.allocator import limit_arenas, trim
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
blocks = [bytearray(4096) for _ in range(20_000)]  # 80 MB from the heap, below the last
del blocks[:-1]  # all free but the last: a hole glibc keeps (it trims only the heap's top)
before = rss()
said = trim()
print(said, (before - rss()) // 2**20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_returns_the_holes_a_burst_left() -> None:
    done = subprocess.run([sys.executable, "-c", HOLES], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    said, freed = done.stdout.split()
    assert said == "True" and int(freed) >= 60  # of the 80 MB freed in the middle
