"""Other projects' controllers run as host processes against an API server (cert-manager's
controllers, the Prometheus Operator): each with its log file, checked and stopped
together."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class HostPrograms:
    """Processes named `<title>-<name>`, each logging to `logs/<title>-<name>.log`."""

    def __init__(self, title: str, logs: Path) -> None:
        self.title = title
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        with self.log(name).open("ab") as out:
            self.procs[name] = subprocess.Popen(
                list(args), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=None if env is None else dict(env),
            )  # fmt: skip

    def log(self, name: str) -> Path:
        return self.logs / f"{self.title}-{name}.log"

    def tail(self, name: str, lines: int = 30) -> str:
        return "\n".join(self.log(name).read_text(errors="replace").splitlines()[-lines:])

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{self.title} {name} exited ({proc.returncode}); its log:\n{self.tail(name)}"
                )

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
