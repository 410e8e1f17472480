"""The pause before trying again what failed: of a reconcile (the work queue) and of a
watch (watches.py)."""


def retry_delay(first: float, failures: int, longest: float) -> float:
    """`first` after one failure, doubling with each one after it, at most `longest` (so
    a write, or a watch, that keeps failing does not load the API server)."""
    return min(first * 2 ** min(failures - 1, 30), max(first, longest))
