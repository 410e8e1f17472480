"""A local Hugging Face hub for tests: model repos served from folders over HTTP.

It answers what huggingface_hub (0.36 and 2.x) asks when it resolves and downloads a model:
model info (`/api/models/<id>[/revision/<rev>]`, siblings with size, blobId and LFS sha256
with `?blobs=true`), the tree (`/api/models/<id>/tree/<rev>`), and HEAD/GET
`/<id>/resolve/<rev>/<file>` with the X-Repo-Commit, ETag/X-Linked-Etag and X-Linked-Size
headers and Range requests (so downloads resume). Errors carry the hub's X-Error-Code
(RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) and status codes.

A commit is a snapshot of a folder: its files are hashed when committed and read when
served. Branches and tags point at commits; a gated repo serves files only to a granted
token. For tests it counts file downloads per repo, can pause a repo's downloads after N
bytes and can corrupt a served file. Standard library only: the project venv has no
huggingface_hub. `python -m spyre_devcluster.hub --repo ID=DIR ...` serves folders.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# Files the hub's default .gitattributes stores in LFS (and so hashes with sha256).
LFS_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".onnx",
    ".gguf",
    ".model",
    ".pkl",
    ".npy",
    ".zip",
    ".tar",
    ".gz",
)
CHUNK = 64 * 1024
_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class Blob:
    """One file of a commit: where its bytes are and what the hub says about them."""

    source: Path
    size: int
    sha256: str
    git_sha1: str  # of the content
    lfs: bool

    @classmethod
    def of(cls, source: Path, path: str) -> Blob:
        size = source.stat().st_size
        sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
        with open(source, "rb") as f:
            while chunk := f.read(1 << 20):
                sha256.update(chunk)
                sha1.update(chunk)
        return cls(source, size, sha256.hexdigest(), sha1.hexdigest(), path.endswith(LFS_SUFFIXES))

    @property
    def pointer(self) -> bytes:
        """The git-lfs pointer file git stores instead of an LFS file's content."""
        return (
            f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
            f"size {self.size}\n"
        ).encode()

    @property
    def blob_id(self) -> str:
        return git_blob_sha1(self.pointer) if self.lfs else self.git_sha1

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_sha1

    def lfs_info(self, sha_key: str) -> dict[str, Any]:
        return {sha_key: self.sha256, "size": self.size, "pointerSize": len(self.pointer)}


class Pause:
    """Holds a repo's downloads once `after` bytes were served, until released."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.reached = threading.Event()
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()


@dataclass
class Repo:
    id: str
    gated: bool
    commits: dict[str, dict[str, Blob]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # branches and tags
    downloads: Counter[str] = field(default_factory=Counter)
    corrupted: set[str] = field(default_factory=set)
    bytes_served: int = 0
    pause: Pause | None = None

    def resolve(self, revision: str) -> str:
        if revision in self.refs:
            return self.refs[revision]
        if revision in self.commits:
            return revision
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    range: str | None


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit


class LocalHub:
    """The hub; a context manager that serves in a thread. port 0 picks a free port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.repos: dict[str, Repo] = {}
        self.tokens: dict[str, set[str]] = {}  # token -> gated repos it was granted
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.hub = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    def start(self) -> LocalHub:
        # A short poll interval: stop() waits for the loop to notice.
        serve = lambda: self._server.serve_forever(poll_interval=0.05)  # noqa: E731
        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening; paused downloads are released so their threads end."""
        for repo in self.repos.values():
            if repo.pause:
                repo.pause.release()
        if self._thread:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    # -- repos --------------------------------------------------------------------------
    def add_repo(self, repo_id: str, folder: Path, *, gated: bool = False) -> str:
        """A new repo whose branch `main` holds `folder`; returns the commit."""
        if repo_id in self.repos:
            raise ValueError(f"repo {repo_id} exists")
        self.repos[repo_id] = Repo(repo_id, gated)
        return self.commit(repo_id, folder)

    def commit(self, repo_id: str, folder: Path, *, branch: str = "main") -> str:
        """A commit of `folder` (every file below it) on `branch`, which moves to it."""
        repo = self.repos[repo_id]
        files = {
            p.relative_to(folder).as_posix(): Blob.of(p, p.relative_to(folder).as_posix())
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
        lines = [repo_id, repo.refs.get(branch, "")]
        lines += [f"{path} {blob.blob_id}" for path, blob in files.items()]
        sha = hashlib.sha1("\n".join(lines).encode()).hexdigest()
        repo.commits[sha] = files
        repo.refs[branch] = sha
        return sha

    def tag(self, repo_id: str, name: str, revision: str) -> str:
        repo = self.repos[repo_id]
        repo.refs[name] = sha = repo.resolve(revision)
        return sha

    def grant(self, token: str, *repo_ids: str) -> None:
        """Make `token` valid, with access to the gated `repo_ids`."""
        self.tokens.setdefault(token, set()).update(repo_ids)

    def corrupt(self, repo_id: str, path: str) -> None:
        """Serve `path` with one byte flipped (size and advertised hashes unchanged)."""
        self.repos[repo_id].corrupted.add(path)

    def pause_after(self, repo_id: str, nbytes: int) -> Pause:
        """Hold the repo's file downloads once `nbytes` of them were served in total."""
        pause = self.repos[repo_id].pause = Pause(self.repos[repo_id].bytes_served + nbytes)
        return pause

    def downloads(self, repo_id: str) -> int:
        """GET requests that sent a file's bytes (a resumed file counts again)."""
        return sum(self.repos[repo_id].downloads.values())

    def file_downloads(self, repo_id: str) -> dict[str, int]:
        return dict(self.repos[repo_id].downloads)

    # -- requests -----------------------------------------------------------------------
    def find(self, parts: list[str], token: str | None) -> tuple[Repo, list[str]]:
        """The repo a path starts with (`org/name` or `name`) and the rest of the path."""
        if len(parts) >= 2 and f"{parts[0]}/{parts[1]}" in self.repos:
            return self.repos[f"{parts[0]}/{parts[1]}"], parts[2:]
        if parts and parts[0] in self.repos:
            return self.repos[parts[0]], parts[1:]
        # The hub answers 401 to anonymous requests so as not to reveal private repos.
        raise HubError(401 if token is None else 404, "RepoNotFound", "Repository not found")

    def check_access(self, repo: Repo, token: str | None) -> None:
        if not repo.gated or (token is not None and repo.id in self.tokens[token]):
            return
        if token is None:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to model {repo.id} is restricted. You must "
                "have access to it and be authenticated to access it. Please log in.",
            )
        raise HubError(
            403,
            "GatedRepo",
            f"Access to model {repo.id} is restricted and you are "
            f"not in the authorized list. Visit {self.url}/{repo.id} to ask for access.",
        )

    def info(self, repo: Repo, revision: str, blobs: bool) -> dict[str, Any]:
        sha = repo.resolve(revision)

        def sibling(path: str, blob: Blob) -> dict[str, Any]:
            if not blobs:
                return {"rfilename": path}
            lfs = {"lfs": blob.lfs_info("sha256")} if blob.lfs else {}
            return {"rfilename": path, "size": blob.size, "blobId": blob.blob_id, **lfs}

        return {
            "_id": sha[:24],
            "id": repo.id,
            "modelId": repo.id,
            "sha": sha,
            "private": False,
            "gated": "auto" if repo.gated else False,
            "disabled": False,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "createdAt": "2026-01-01T00:00:00.000Z",
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "library_name": "transformers",
            "siblings": [sibling(p, b) for p, b in repo.commits[sha].items()],
        }

    def tree(self, repo: Repo, revision: str, prefix: str, recursive: bool) -> list[Any]:
        files = repo.commits[repo.resolve(revision)]
        base = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        entries: dict[str, dict[str, Any]] = {}
        for path, blob in files.items():
            if not path.startswith(base):
                continue
            parts = path[len(base) :].split("/")
            for depth in range(1, len(parts)):  # the folders on the way
                folder = base + "/".join(parts[:depth])
                if recursive or depth == 1:
                    oid = hashlib.sha1(folder.encode()).hexdigest()
                    entries[folder] = {"type": "directory", "oid": oid, "size": 0, "path": folder}
            if recursive or len(parts) == 1:
                lfs = {"lfs": blob.lfs_info("oid")} if blob.lfs else {}
                entries[path] = {
                    "type": "file",
                    "oid": blob.blob_id,
                    "size": blob.size,
                    "path": path,
                    **lfs,
                }
        return [entries[k] for k in sorted(entries)]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: LocalHub


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read hub.requests
        pass

    def do_GET(self) -> None:
        self.handle_request(body=True)

    def do_HEAD(self) -> None:
        self.handle_request(body=False)

    def handle_request(self, body: bool) -> None:
        hub = self.server.hub
        url = urlsplit(self.path)
        with hub.lock:
            hub.requests.append(Request(self.command, url.path, self.headers.get("Range")))
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        try:
            token = self.token()
            if parts[:2] == ["api", "models"]:
                self.api(parts[2:], parse_qs(url.query), token, body)
            else:
                self.resolve(parts, token, body)
        except HubError as e:
            headers = {"X-Error-Message": e.message, **({"X-Error-Code": e.code} if e.code else {})}
            if e.commit:
                headers["X-Repo-Commit"] = e.commit
            self.send_json(e.status, {"error": e.message}, body, headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (killed mid-download)

    def token(self) -> str | None:
        value = self.headers.get("Authorization")
        if not value:
            return None
        token = value.removeprefix("Bearer ").strip()
        if token not in self.server.hub.tokens:
            raise HubError(401, None, "Invalid credentials in Authorization header")
        return token

    def api(
        self, parts: list[str], query: dict[str, list[str]], token: str | None, body: bool
    ) -> None:
        hub = self.server.hub
        repo, rest = hub.find(parts, token)
        flag = lambda name: query.get(name, ["false"])[0].lower() in ("true", "1")  # noqa: E731
        if not rest:
            self.send_json(200, hub.info(repo, "main", flag("blobs")), body)
        elif rest[0] == "revision" and len(rest) == 2:
            self.send_json(200, hub.info(repo, rest[1], flag("blobs")), body)
        elif rest[0] == "tree" and len(rest) >= 2:
            entries = hub.tree(repo, rest[1], "/".join(rest[2:]), flag("recursive"))
            self.send_json(200, entries, body)
        else:
            raise HubError(404, None, "Not found")

    def resolve(self, parts: list[str], token: str | None, body: bool) -> None:
        hub = self.server.hub
        repo, rest = hub.find(parts, token)
        if len(rest) < 3 or rest[0] != "resolve":
            raise HubError(404, None, "Not found")
        sha = repo.resolve(rest[1])
        path = "/".join(rest[2:])
        hub.check_access(repo, token)
        blob = repo.commits[sha].get(path)
        if blob is None:
            raise HubError(404, "EntryNotFound", "Entry not found", commit=sha)
        start, end = self.byte_range(blob.size, sha)
        headers = {
            "X-Repo-Commit": sha,
            "ETag": f'"{blob.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if blob.lfs:
            headers |= {"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)}
        partial = (start, end) != (0, blob.size - 1) and self.headers.get("Range") is not None
        if partial:
            headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
        self.send(206 if partial else 200, end - start + 1, headers)
        if body:
            with hub.lock:
                repo.downloads[path] += 1
            self.stream(repo, path, blob, start, end)

    def byte_range(self, size: int, sha: str) -> tuple[int, int]:
        header = self.headers.get("Range")
        match = _RANGE_RE.match(header or "")
        if not match:
            return 0, size - 1
        start = int(match[1])
        end = min(int(match[2]), size - 1) if match[2] else size - 1
        if start >= size or start > end:
            raise HubError(416, None, f"Range {header} not satisfiable (size {size})", sha)
        return start, end

    def stream(self, repo: Repo, path: str, blob: Blob, start: int, end: int) -> None:
        hub = self.server.hub
        flip = blob.size // 2 if path in repo.corrupted else -1
        with open(blob.source, "rb") as f:
            f.seek(start)
            position = start
            while position <= end:
                size = min(CHUNK, end + 1 - position)
                pause = repo.pause
                if pause and not pause.released.is_set():
                    allowed = pause.after - repo.bytes_served
                    if allowed <= 0:
                        pause.reached.set()
                        pause.released.wait()
                        continue
                    size = min(size, allowed)
                chunk = bytearray(f.read(size))
                if position <= flip < position + len(chunk):
                    chunk[flip - position] ^= 0xFF
                self.wfile.write(chunk)
                self.wfile.flush()
                position += len(chunk)
                with hub.lock:
                    repo.bytes_served += len(chunk)

    def send(self, status: int, length: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def send_json(
        self, status: int, payload: Any, body: bool, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send(status, len(data), {"Content-Type": "application/json", **(headers or {})})
        if body:
            self.wfile.write(data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m spyre_devcluster.hub",
        description="Serve folders as Hugging Face model repos.",
    )
    parser.add_argument("--repo", action="append", default=[], metavar="ID=DIR", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    hub = LocalHub(args.host, args.port)
    for spec in args.repo:
        repo_id, _, folder = spec.partition("=")
        print(f"{repo_id} main -> {hub.add_repo(repo_id, Path(folder))}", flush=True)
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    try:
        hub._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        hub._server.server_close()


if __name__ == "__main__":
    main()
