"""/metrics: the exposition (metrics.py) served over HTTP, and read back (the tests and
the benchmark scrape it)."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

CHUNK = 1000  # lines of the exposition per write of a scrape (~100 KB)


def parse(text: str) -> dict[str, float]:
    """Samples by name (with labels) of an exposition; comments skipped."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def serve(lines: Callable[[], Iterable[str]], port: int) -> ThreadingHTTPServer:
    """GET any path -> lines() (the exposition), on 0.0.0.0:port, from a thread: written
    CHUNK lines at a time as they come, the body ended by closing the connection (HTTP/1.0,
    no Content-Length), so a scrape never holds the whole text."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            remaining = iter(lines())
            while chunk := list(itertools.islice(remaining, CHUNK)):
                self.wfile.write(("\n".join(chunk) + "\n").encode())

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes are not worth a log line."""

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics on http://0.0.0.0:%d/metrics", port)
    return server
