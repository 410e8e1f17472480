"""`spyre-runtime weights [--from DIR]`: one model at one commit into the cache volume.

The weights Job's container (docs/contract.md, "Model weights"). It resolves
SPYRE_SERVING_MODEL_REVISION to a commit with the hub's model info, downloads what vLLM
needs into `<root>/weights/<id>/.partial-<commit>/`, verifies each file against the hub's
size and hash, and publishes the directory as `<root>/weights/<id>/<commit>/`
(weightstore.py). A pinned commit already on the volume needs no hub at all. `--from DIR`
fills the directory from a local copy instead (an air-gapped cluster).

huggingface_hub is imported only inside the command (the operator's unit tests import
this package); 0.36 (requests) and 2.x (httpx2) both work.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ContractError
from .contract import (
    HF_ENDPOINT,
    HF_TOKEN,
    PERMANENT,
    SPYRE_SERVING_CACHE_ROOT,
    SPYRE_SERVING_MODEL_ID,
    SPYRE_SERVING_MODEL_REVISION,
    Reason,
    Summary,
)
from .report import Progress, failure, log, termination_log, write_summary
from .weightstore import (
    MANIFEST_NAME,
    Expected,
    Layout,
    WeightsError,
    digest,
    is_commit,
    model_id_problem,
    publish,
    safe_relative,
    select,
    tidy,
    verify,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_FIELD = "spec.model.source.hub.tokenSecret"
DOWNLOAD_WORKERS = 4
LOCK_WAIT_LOG_SECONDS = 60
# Folders of a local copy that are not the model: git's and huggingface_hub's metadata.
SKIPPED_SOURCE_DIRS = (".git", ".cache")


@dataclass(frozen=True)
class WeightsConfig:
    model_id: str
    revision: str
    layout: Layout
    endpoint: str
    has_token: bool


def parse_env(environ: Mapping[str, str]) -> WeightsConfig:
    model_id = environ.get(SPYRE_SERVING_MODEL_ID, "")
    if not model_id:
        raise ContractError(f"{SPYRE_SERVING_MODEL_ID} must be set to the hub id (org/name)")
    problem = model_id_problem(model_id)
    if problem:
        raise ContractError(f"{SPYRE_SERVING_MODEL_ID}: {problem}")
    revision = environ.get(SPYRE_SERVING_MODEL_REVISION) or "main"
    if len(revision) > 255 or not revision.isprintable() or any(c.isspace() for c in revision):
        raise ContractError(
            f"{SPYRE_SERVING_MODEL_REVISION}={revision!r} is not a branch, tag or commit"
        )
    root = environ.get(SPYRE_SERVING_CACHE_ROOT)
    if not root:
        raise ContractError(
            f"{SPYRE_SERVING_CACHE_ROOT} must be set to the cache volume's mount path"
        )
    if not Path(root).is_dir():
        raise ContractError(
            f"{SPYRE_SERVING_CACHE_ROOT}={root} is not a directory (is the cache volume mounted?)"
        )
    return WeightsConfig(
        model_id,
        revision,
        Layout(Path(root), model_id),
        (environ.get(HF_ENDPOINT) or DEFAULT_ENDPOINT).rstrip("/"),
        bool(environ.get(HF_TOKEN)),
    )


def parse_args(args: Sequence[str]) -> Path | None:
    """The `--from DIR` source, if given."""
    if not args:
        return None
    if len(args) == 2 and args[0] == "--from":
        return Path(args[1])
    raise ContractError(f"unexpected arguments {' '.join(args)!r}: weights takes only --from DIR")


def run(args: Sequence[str], environ: Mapping[str, str]) -> int:
    progress = Progress()
    cfg: WeightsConfig | None = None
    try:
        cfg = parse_env(environ)
        source = parse_args(args)
        summary = preload(cfg, source, progress) if source else fetch(cfg, progress)
    except ContractError as e:
        summary = failure("InvalidConfig", str(e))
    except WeightsError as e:
        summary = failure(e.reason, e.message)
    except Exception as e:
        assert cfg is not None  # parse_env raises only ContractError
        reason, message = classify(e, cfg)
        # The hub's known answers need no traceback; anything else keeps it in the log.
        level = logging.ERROR if reason == "DownloadFailed" else logging.DEBUG
        log.log(level, "what failed:", exc_info=e)
        summary = failure(reason, message)
    if not summary["ok"]:
        summary["id"] = environ.get(SPYRE_SERVING_MODEL_ID, "")
        summary["revision"] = environ.get(SPYRE_SERVING_MODEL_REVISION) or "main"
    write_summary(termination_log(environ), summary)
    if summary["ok"]:
        return 0
    # Nothing a rerun could fix: exit 2, so the operator does not retry (1: retry).
    log.error("weights failed: %s: %s", summary["reason"], summary["message"])
    return 2 if summary["reason"] in PERMANENT else 1


def ok(
    cfg: WeightsConfig, manifest: dict[str, Any], downloaded: bool, progress: Progress
) -> Summary:
    return {
        "ok": True,
        "id": cfg.model_id,
        "revision": cfg.revision,
        "commit": manifest["commit"],
        "bytes": manifest["bytes"],
        "files": len(manifest["files"]),
        "downloaded": downloaded,
        "seconds": progress.elapsed(),
    }


def fetch(cfg: WeightsConfig, progress: Progress) -> Summary:
    """From the hub: resolve, download, verify, publish (or find it already there)."""
    layout = cfg.layout
    if is_commit(cfg.revision) and (manifest := layout.ready(cfg.revision)):
        progress.step("ready", f"{layout.final(cfg.revision)} (pinned commit; hub not asked)")
        return ok(cfg, manifest, False, progress)
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # one log line per file instead
    progress.step("resolve", f"{cfg.model_id} revision {cfg.revision} on {cfg.endpoint}")
    info = HfApi().model_info(cfg.model_id, revision=cfg.revision, files_metadata=True)
    commit: str = info.sha
    progress.step("resolved", f"{cfg.revision} -> {commit}")
    if manifest := layout.ready(commit):
        progress.step("ready", f"{layout.final(commit)}")
        return ok(cfg, manifest, False, progress)
    if info.gated and not cfg.has_token:
        raise WeightsError("GatedModel", gated_message(cfg))
    expected = hub_files(info.siblings or [])

    def fill(partial: Path) -> None:
        download(cfg, commit, expected, partial, progress)

    return store(cfg, commit, expected, fill, progress, resume=True)


def hub_files(siblings: Sequence[Any]) -> list[Expected]:
    """What to fetch, from the model info's siblings (with files_metadata=True)."""
    by_path = {s.rfilename: s for s in siblings}
    files = []
    for path in select(by_path):
        sibling = by_path[path]
        if not safe_relative(path) or sibling.size is None:
            raise WeightsError(
                "DownloadFailed",
                f"the hub lists {path!r} without a size or with a path outside the model directory",
            )
        lfs = sibling.lfs
        files.append(
            Expected(
                path,
                sibling.size,
                sha256=lfs.sha256 if lfs else None,
                git_sha1=None if lfs else sibling.blob_id,
            )
        )
    return files


def download(
    cfg: WeightsConfig, commit: str, expected: list[Expected], partial: Path, progress: Progress
) -> None:
    """Each file with hf_hub_download into `partial` (local_dir: a file already there for
    this commit is kept, and 0.36 resumes a half-downloaded one)."""
    from huggingface_hub import hf_hub_download

    total = sum(f.size for f in expected)
    progress.step("download", f"{len(expected)} files, {total} bytes into {partial}")
    done = 0
    pool = ThreadPoolExecutor(max_workers=DOWNLOAD_WORKERS)
    try:
        futures = {
            pool.submit(
                hf_hub_download, cfg.model_id, f.path, revision=commit, local_dir=partial
            ): f
            for f in expected
        }
        for future in as_completed(futures):
            future.result()
            done += 1
            file = futures[future]
            progress.step("downloaded", f"{file.path} ({file.size} bytes, {done}/{len(expected)})")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def check_space(cfg: WeightsConfig, partial: Path, expected: list[Expected]) -> None:
    def present(f: Expected) -> bool:
        path = partial / f.path
        return path.is_file() and path.stat().st_size == f.size

    total = sum(f.size for f in expected)
    needed = total - sum(f.size for f in expected if present(f))
    free = shutil.disk_usage(cfg.layout.model_dir).free
    if needed > free:
        detail = f"{gb(needed)} of it still to write, {gb(free)} free"
        raise WeightsError("OutOfSpace", space_message(cfg, total, detail))


def preload(cfg: WeightsConfig, source: Path, progress: Progress) -> Summary:
    """From a local copy (--from): no hub; the manifest records sizes and sha256."""
    if not is_commit(cfg.revision):
        raise ContractError(
            f"--from needs {SPYRE_SERVING_MODEL_REVISION} to be the full 40-character commit "
            "the copy was taken at (it names the directory serving pods mount), not "
            f"{cfg.revision!r}"
        )
    if not source.is_dir():
        raise ContractError(f"--from {source}: not a directory")
    if manifest := cfg.layout.ready(cfg.revision):
        progress.step("ready", f"{cfg.layout.final(cfg.revision)}")
        return ok(cfg, manifest, False, progress)

    # Hashed at the source, so that verifying the copy checks what reached the volume.
    expected = [
        Expected(path, (source / path).stat().st_size, sha256=digest(source / path, "sha256"))
        for path in local_files(source)
    ]

    def fill(partial: Path) -> None:
        progress.step("copy", f"{len(expected)} files from {source} into {partial}")
        for file in expected:
            target = partial / file.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / file.path, target)  # follows symlinks (HF cache snapshots)

    return store(cfg, cfg.revision, expected, fill, progress, resume=False)


def local_files(source: Path) -> list[str]:
    found = []
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if relative.parts[0] in SKIPPED_SOURCE_DIRS or relative.name == MANIFEST_NAME:
            continue
        if path.is_file():
            found.append(relative.as_posix())
    return select(found)


def store(
    cfg: WeightsConfig,
    commit: str,
    expected: list[Expected],
    fill: Callable[[Path], None],
    progress: Progress,
    resume: bool,
) -> Summary:
    """Under the commit's lock: fill the partial directory (resuming what an earlier run
    left, if `resume`), verify it, publish it."""
    layout = cfg.layout
    layout.make_dirs()
    with locked(layout.lock(commit), progress):
        if manifest := layout.ready(commit):  # another run published it meanwhile
            return ok(cfg, manifest, False, progress)
        partial = layout.partial(commit)
        if not resume:
            shutil.rmtree(partial, ignore_errors=True)
        check_space(cfg, partial, expected)
        try:
            fill(partial)
            progress.step("verify", f"{len(expected)} files")
            verify(partial, expected)
        except WeightsError as e:
            if e.reason == "ChecksumMismatch":
                shutil.rmtree(partial, ignore_errors=True)  # the next run starts clean
            raise
        except Exception as e:
            if any(isinstance(x, OSError) and x.errno == errno.ENOSPC for x in chain(e)):
                total = sum(f.size for f in expected)
                raise WeightsError("OutOfSpace", space_message(cfg, total, "it filled up")) from e
            raise
        tidy(partial, [f.path for f in expected])
        manifest = {
            "id": cfg.model_id,
            "revision": cfg.revision,
            "commit": commit,
            "files": {f.path: f.entry() for f in expected},
            "bytes": sum(f.size for f in expected),
        }
        published = publish(layout, commit, manifest)
        progress.step("published" if published else "ready", f"{layout.final(commit)}")
        return ok(cfg, manifest, published, progress)


@contextlib.contextmanager
def locked(path: Path, progress: Progress) -> Iterator[None]:
    """One run per commit at a time (a second Job for the same commit waits, then finds it
    ready); the kernel drops the lock of a killed run."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path), mode=0o664)
    progress.step("lock", f"{path}")
    while True:
        try:
            lock.acquire(timeout=LOCK_WAIT_LOG_SECONDS)
            break
        except Timeout:
            progress.step("wait", f"another run holds {path}")
    try:
        yield
    finally:
        lock.release()


def gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def space_message(cfg: WeightsConfig, total: int, detail: str) -> str:
    return (
        f"{cfg.model_id} needs {gb(total)} on the cache volume ({detail} at "
        f"{cfg.layout.root}): give the cache volume more space, or remove unused models "
        f"under {cfg.layout.root}/weights"
    )


def gated_message(cfg: WeightsConfig) -> str:
    page = f"{cfg.endpoint}/{cfg.model_id}"
    if not cfg.has_token:
        return (
            f"{cfg.model_id} is a gated model and no token was given: set {TOKEN_FIELD} "
            f"to a Secret with a token that was granted access (request it on {page})"
        )
    return (
        f"the token from {TOKEN_FIELD} has not been granted access to the gated model "
        f"{cfg.model_id}: request access on {page} for that token's account, or use a "
        "token that was granted access"
    )


def classify(error: BaseException, cfg: WeightsConfig) -> tuple[Reason, str]:
    """The summary reason and message for an exception out of huggingface_hub."""
    try:
        from huggingface_hub import errors as hf
    except ImportError:
        return "DownloadFailed", f"huggingface_hub is not installed in this image: {error}"
    transport = transport_errors()
    for e in chain(error):
        if isinstance(e, hf.GatedRepoError):
            return "GatedModel", gated_message(cfg)
        if isinstance(e, hf.RepositoryNotFoundError):
            access = (
                "the token has no access to it, if it is private"
                if cfg.has_token
                else f"a private repo needs a token with access, {TOKEN_FIELD}"
            )
            return "ModelNotFound", (
                f"{cfg.model_id} was not found on {cfg.endpoint}: check the model id ({access})"
            )
        if isinstance(e, hf.RevisionNotFoundError):
            return "RevisionNotFound", (
                f"{cfg.model_id} has no revision {cfg.revision!r} on "
                f"{cfg.endpoint}: use an existing branch, tag or full "
                "40-character commit"
            )
        status = getattr(getattr(e, "response", None), "status_code", None)
        if isinstance(e, hf.HfHubHTTPError) and status in (401, 403):
            return "Unauthorized", (
                f"{cfg.endpoint} refused the token (HTTP {status}): check the "
                f"token in the Secret named by {TOKEN_FIELD}"
            )
        if (
            isinstance(e, hf.HfHubHTTPError) and isinstance(status, int) and status >= 500
        ) or isinstance(e, transport):
            return "HubUnreachable", (
                f"cannot reach the hub at {cfg.endpoint} ({type(e).__name__}: "
                f"{e}); a cluster without hub access can pre-load the cache "
                "volume instead (spyre-runtime weights --from)"
            )
    return "DownloadFailed", f"{type(error).__name__}: {error}"


def chain(error: BaseException) -> Iterator[BaseException]:
    """The exception and its causes/contexts, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def transport_errors() -> tuple[type[BaseException], ...]:
    """Connection failures and timeouts of whichever HTTP client huggingface_hub uses."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, names in (
        ("requests", ("ConnectionError", "Timeout")),
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
    ):
        try:
            imported = importlib.import_module(module)
        except ImportError:
            continue
        found += [getattr(imported, name) for name in names]
    return tuple(found)
