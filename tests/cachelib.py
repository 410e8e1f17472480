"""A compiled key's directory as the compile Job leaves it, for the cache-sharing tests
(tests/runtime/test_runtime_cacheartifact_unit.py, tests/integration/test_cache_registry.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spyre_runtime.cacheartifact import canonical_key
from spyre_runtime.catalog import upsert_catalog_entry, write_ready

COMMIT = "c0ffee" * 6 + "abcd"
CONFIG: dict[str, Any] = {
    "model": "ibm-granite/tiny",
    "revision": COMMIT,
    "runtime": {"flavour": "vllm-spyre"},
}
KEY = canonical_key(CONFIG)


def compiled(root: Path, config: dict[str, Any] = CONFIG) -> Path:
    """`<root>/<key>/`: graphs, inductor (a kernel with its executable bit), the catalog and
    READY with what a compile records."""
    key = canonical_key(config)
    path = root / key
    (path / "inductor" / "fx").mkdir(parents=True)
    (path / "inductor" / "fx" / "graph.bin").write_bytes(b"g" * 3000)
    (path / "inductor" / "kernel.so").write_bytes(b"\x7fELF" * 10)
    (path / "inductor" / "kernel.so").chmod(0o755)
    (path / "sendnn-graph.bin").write_bytes(b"s" * 5000)
    entry = {"vllm_spyre_version": "1.10.0", "data": {"MODEL_NAME": config["model"]}}
    upsert_catalog_entry(path, entry)
    write_ready(
        path,
        {
            "cacheKey": key,
            "config": config,
            "flavour": "vllm-spyre",
            "catalogEntry": entry,
            "inductorFiles": {"fx/graph.bin": 3000, "kernel.so": 40},
            "versions": {"vllm_spyre": "1.10.0", "vllm": "0.17.1"},
            "bytes": 8040,
        },
    )
    return path


def files_of(key_dir: Path) -> dict[str, bytes]:
    """What a key's directory holds besides READY and the catalog's lock."""
    return {
        str(p.relative_to(key_dir)): p.read_bytes()
        for p in sorted(key_dir.rglob("*"))
        if p.is_file() and p.name not in ("READY", ".catalog.lock")
    }
