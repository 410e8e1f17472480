"""The Jobs' side of a cache registry: `spyre-runtime pull` (the pull Job, which fetches
the key instead of compiling it) and the publish step of `precompile`.

Both read the registry from the env (contract.py: SPYRE_SERVING_CACHE_REGISTRY, _AUTH, _CA)
and the key from the usual SPYRE_SERVING_CACHE_ROOT/KEY. A pull that finds nothing, or
refuses what it found, exits 1 with a summary whose reason says so (`NotInRegistry`,
`ArtifactRefused`, `RegistryUnavailable`): the operator then compiles as without a
registry. A publish that fails leaves the compile a success and says why in its summary.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from .cacheartifact import Refused, architecture
from .cacheshare import Moved, fetch, publish
from .contract import (
    SPYRE_SERVING_CACHE_KEY,
    SPYRE_SERVING_CACHE_REGISTRY,
    SPYRE_SERVING_CACHE_REGISTRY_AUTH,
    SPYRE_SERVING_CACHE_REGISTRY_CA,
    SPYRE_SERVING_CACHE_ROOT,
    Summary,
    Transfer,
)
from .ociregistry import Client, RegistryError, Repository, read_credentials
from .report import failure, log, termination_log, write_summary


def client_from_env(environ: Mapping[str, str]) -> Client | None:
    """The configured registry's client; None without SPYRE_SERVING_CACHE_REGISTRY."""
    named = environ.get(SPYRE_SERVING_CACHE_REGISTRY, "")
    if not named:
        return None
    repository = Repository.parse(named)
    auth_file = environ.get(SPYRE_SERVING_CACHE_REGISTRY_AUTH)
    auth = read_credentials(Path(auth_file), repository.host) if auth_file else None
    # A Secret without ca.crt (a registry with a public certificate) leaves the path absent.
    ca = environ.get(SPYRE_SERVING_CACHE_REGISTRY_CA)
    return Client(repository, auth, ca if ca and Path(ca).exists() else None)


def transfer(moved: Moved) -> Transfer:
    return {
        "reference": moved.reference,
        "digest": moved.digest,
        "bytes": moved.bytes,
        "seconds": round(moved.seconds, 1),
    }


def publish_ready(environ: Mapping[str, str], root: Path, key: str) -> Summary:
    """Publish the key the compile just made READY, if a registry is configured: the
    summary's `published` or `publishProblem` (empty without a registry)."""
    try:
        client = client_from_env(environ)
        if client is None:
            return {"ok": True}
        moved = publish(client, root, key, architecture())
    except (RegistryError, Refused) as e:
        log.warning("the compiled cache was not published: %s", e)
        return {"ok": True, "publishProblem": str(e)}
    log.info("published %s: %d bytes in %.1f s", moved.reference, moved.bytes, moved.seconds)
    return {"ok": True, "published": transfer(moved)}


def pull(environ: Mapping[str, str]) -> int:
    """The pull Job: fetch `<root>/<key>` from the registry, verified, READY last."""
    root = Path(environ.get(SPYRE_SERVING_CACHE_ROOT, ""))
    key = environ.get(SPYRE_SERVING_CACHE_KEY, "")
    began = time.monotonic()

    def fail(summary: Summary) -> int:
        log.error("pull: %s: %s", summary["reason"], summary["message"])
        write_summary(termination_log(environ), {**summary, "cacheKey": key or None})
        return 1

    try:
        client = client_from_env(environ)
        if client is None:
            return fail(failure("InvalidConfig", f"{SPYRE_SERVING_CACHE_REGISTRY} is not set"))
        moved = fetch(client, root, key, architecture())
    except Refused as e:
        return fail(failure("ArtifactRefused", f"the registry's artifact was refused: {e}"))
    except RegistryError as e:
        return fail(failure("RegistryUnavailable", str(e)))
    if moved is None:
        where = environ[SPYRE_SERVING_CACHE_REGISTRY]
        return fail(
            failure("NotInRegistry", f"{where} has no cache of key {key} for this architecture")
        )
    log.info(
        "pulled %s: %d bytes, %d files in %.1f s",
        moved.reference,
        moved.bytes,
        moved.files,
        moved.seconds,
    )
    seconds = round(time.monotonic() - began, 1)
    summary: Summary = {"ok": True, "cacheKey": key, "seconds": seconds, "pulled": transfer(moved)}
    if moved.written is not None:
        summary["bytes"] = moved.written
    write_summary(termination_log(environ), summary)
    return 0
