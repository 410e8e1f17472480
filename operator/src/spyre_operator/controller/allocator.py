"""Fewer C allocator arenas for the operator process, and their free pages given back.

glibc gives a thread that allocates while another holds an arena an arena of its own, up
to eight per core. The reconcile workers, the watches and the Events poster each fill one
with the large blocks of a burst (HTTP bodies, big dicts); the blocks that stay (the
stores' entries) are spread over all of them and keep their pages resident after the
burst. Python holds the GIL anyway, so more arenas buy little concurrency. Two: RSS with
4,000 SpyreModels created back to back 205 -> 187 MB (docs/operator.md, "At scale").
A burst also leaves free holes in the arenas below blocks still in use, which glibc keeps
resident: `trim` returns them (after each resync pass: 7 MB of 259 at 10,000 SpyreModels).
"""

from __future__ import annotations

import ctypes

ARENAS = 2
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def limit_arenas(count: int = ARENAS, told: int | None = None) -> bool:
    """At most `count` arenas for what is allocated from now on, unless MALLOC_ARENA_MAX
    (`told`, as the settings read it) says otherwise: glibc read it at start-up. False
    then, and where there is no glibc mallopt (musl, macOS): nothing to tune there."""
    if told is not None:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, count))


def trim() -> bool:
    """Return the arenas' free pages to the system (glibc's malloc_trim; milliseconds).
    False where there is no glibc, or nothing was returned."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    return bool(malloc_trim(0))
