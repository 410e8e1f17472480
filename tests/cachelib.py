"""For the cache-sharing tests (tests/unit/test_runtime_cacheartifact.py,
test_runtime_cache_sharing.py, tests/integration/test_cache_registry.py): a compiled key's
directory as the compile Job leaves it, and the testbed's registry without a node."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster import registry
from spyre_devcluster.controlplane import free_port
from spyre_devcluster.simulate import poll_until
from spyre_runtime import contract
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


@dataclass(frozen=True)
class Bed:
    """The testbed's registry (spyre_devcluster.registry: Debian's docker-registry, TLS from
    a CA of its own, basic auth), running."""

    registry: registry.Registry
    storage: Path  # its blobs (distribution's filesystem storage)
    auth_file: Path  # a Docker config with the account

    def job_env(self, repository: str) -> dict[str, str]:
        """The registry's env of the pull and compile Jobs (docs/contract.md)."""
        return {
            contract.SPYRE_SERVING_CACHE_REGISTRY: repository,
            contract.SPYRE_SERVING_CACHE_REGISTRY_AUTH: str(self.auth_file),
            contract.SPYRE_SERVING_CACHE_REGISTRY_CA: self.registry.ca,
        }


@contextmanager
def running_registry(folder: Path, auth: dict[str, Any] | None = None) -> Iterator[Bed]:
    """A registry on loopback with a storage of its own under `folder`, stopped after;
    `auth`: its config's `auth` section instead of the account's htpasswd (its TLS
    certificate and key are in folder/conf)."""
    registry.install(print)
    reg, config = registry.configure(folder / "conf", free_port(), folder / "storage")
    if auth is not None:
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "auth": auth}))
    auth_file = folder / "auth.json"
    auth_file.write_text(json.dumps(reg.docker_config()))
    with (folder / "registry.log").open("w") as log:
        proc = subprocess.Popen(registry.command(config), stdout=log, stderr=subprocess.STDOUT)
    try:
        poll_until(lambda: registry.answers(reg), "the registry answers", 30, interval=0.2)
        yield Bed(reg, folder / "storage", auth_file)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
