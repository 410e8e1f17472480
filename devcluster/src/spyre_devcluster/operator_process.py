"""`spyre-operator ...` as a child process with its output in a log file.

Used by `spyre-operator dev`, the tests and the benchmarks, so starting, checking and
stopping the operator is written once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class OperatorExited(RuntimeError):
    """The operator process ended when it should be running; the message has its log."""


class OperatorProcess:
    def __init__(self, args: Sequence[str], kubeconfig: Path, log: Path) -> None:
        """`args` start with `run`; the kubeconfig is passed as `--kubeconfig` (and
        KUBECONFIG left out of the environment, so the flag is what the operator uses)."""
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.command = [
            sys.executable, "-m", "spyre_operator", *args, "--kubeconfig", str(kubeconfig)
        ]  # fmt: skip
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self, lines: int | None = None) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text if lines is None else "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if not self.running():
            raise OperatorExited(
                f"the operator exited ({self.proc.returncode}); last lines of {self.log}:\n"
                f"{self.output(40)}"
            )

    def kill(self) -> None:
        """SIGKILL: no clean-up, as if the node died."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30) -> bool:
        """SIGTERM, then SIGKILL after `timeout`; True if it was still running."""
        if not self.running():
            return False
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return True
