"""A Prometheus histogram, for the reconciler's metrics and the work queue's."""

from __future__ import annotations

import bisect


class Histogram:
    """Counts of values by bucket (cumulative in the exposition), and their sum. Not
    thread-safe: its owner holds its own lock (and hands out copies)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def lines(self, name: str) -> list[str]:
        out, total = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            total += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            out.append(f'{name}_bucket{{le="{le}"}} {total}')
        return [*out, f"{name}_sum {self.sum:.6f}", f"{name}_count {total}"]

    def copy(self) -> Histogram:
        out = Histogram(self.buckets)
        out.counts, out.sum = list(self.counts), self.sum
        return out
