"""Whether the cache volume still answers while a compile runs.

On a network filesystem whose server is gone (CephFS through ceph-fuse, NFS hard mounts)
every read and write of the volume waits, in the kernel, until the server is back, and no
signal frees a process waiting there, SIGKILL included: the compile just stops, and its
log says nothing. So the process that watches the compile probes the volume beside it: a
small file written, synced and removed in a thread of its own, that may wait forever
without holding up the watcher. A probe unanswered for PATIENCE seconds means the volume
is not answering; the next probe after an answer starts afresh.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

PATIENCE = 20.0  # a healthy network filesystem answers a small write within seconds


class VolumeWatch:
    def __init__(
        self,
        folder: Path,
        patience: float = PATIENCE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder, self.patience, self.clock = folder, patience, clock
        self._since: float | None = None  # when the pending probe started
        self._done = threading.Event()
        self._guard = threading.Lock()

    def _probe(self, done: threading.Event) -> None:
        path = self.folder / f".probe-{socket.gethostname()}-{os.getpid()}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            path.unlink()
        except OSError:
            pass  # an error is an answer: the compile's own I/O reports it
        done.set()

    def stalled(self) -> float | None:
        """Seconds the pending probe has waited, once past PATIENCE; None while the volume
        answers. Starts a probe when none is pending."""
        with self._guard:
            now = self.clock()
            if self._since is not None and self._done.is_set():
                self._since = None
            if self._since is None:
                self._since, self._done = now, threading.Event()
                probe = threading.Thread(target=self._probe, args=(self._done,), daemon=True)
                probe.start()
                return None
            waited = now - self._since
            return waited if waited >= self.patience else None
