"""What the metrics keep of the cache keys, from the status the reconcilers write."""

from __future__ import annotations

from collections import Counter
from typing import Any

from spyre_operator.api.names import CACHE_KIND
from spyre_operator.api.spec import CacheVolume
from spyre_operator.api.status import CACHE_READY
from spyre_operator.render.cachekey import short_key

Who = tuple[str, str, str]  # (kind, namespace, name)
DEFAULT_CLAIM = CacheVolume.model_fields["claim_name"].default


class CacheKeys:
    """What the SpyreModels' and SpyreCaches' status say of the cache keys: the bytes of
    each compiled key on its volume (a SpyreCache's compile report), and the keys waiting
    in the compile queue (CacheReady reason Queued)."""

    def __init__(self) -> None:
        self.compiled: dict[Who, tuple[str, str, int]] = {}  # -> (claim, short key, bytes)
        self.wanted: dict[Who, tuple[str, str]] = {}  # -> (target key, CacheReady reason)

    def record(self, who: Who, status: dict[str, Any], spec: dict[str, Any] | None) -> None:
        cache = status.get("cache") or {}
        size, key = cache.get("bytes"), cache.get("cacheKey")
        if who[0] == CACHE_KIND and cache.get("ok") is True and isinstance(size, int) and key:
            volume = ((spec or {}).get("cache") or {}).get("volume") or {}
            self.compiled[who] = (volume.get("claimName") or DEFAULT_CLAIM, short_key(key), size)
        else:
            self.compiled.pop(who, None)
        by_type = {c.get("type"): c for c in status.get("conditions") or []}
        reason = (by_type.get(CACHE_READY) or {}).get("reason") or ""
        self.wanted[who] = (status.get("targetCacheKey") or "", reason)

    def forget(self, who: Who) -> None:
        self.compiled.pop(who, None)
        self.wanted.pop(who, None)

    def key_bytes(self) -> dict[tuple[str, str, str], int]:
        """(namespace, claim, short key) -> bytes, each key once (an inventory entry and a
        user's SpyreCache of one key report the same compile)."""
        return {(ns, claim, key): size for (_, ns, _), (claim, key, size) in self.compiled.items()}

    def queued(self) -> dict[str, int]:
        """Keys waiting for a compile slot, by namespace; 0 for a namespace with SpyreModels
        or SpyreCaches and none waiting."""
        waiting = {
            (ns, key) for (_, ns, _), (key, reason) in self.wanted.items() if reason == "Queued"
        }
        counts = Counter(ns for ns, _ in waiting)
        return {ns: counts[ns] for ns in sorted({ns for _, ns, _ in self.wanted})}
