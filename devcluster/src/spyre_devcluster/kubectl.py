"""kubectl bound to a kubeconfig and a namespace: how the demo, the benchmarks and the
node tests talk to a local cluster the way a user would."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from spyre_devcluster.tools import tool


class KubectlError(RuntimeError):
    """kubectl exited non-zero; the message carries its stderr."""


class Kubectl:
    def __init__(
        self, kubeconfig: Path, namespace: str | None = "default", binary: str | None = None
    ) -> None:
        self.base = [binary or tool("kubectl"), "--kubeconfig", str(kubeconfig)]
        self.namespace = namespace
        if namespace is not None:
            self.base += ["-n", namespace]

    def __call__(self, *args: str, input: str | None = None, timeout: float = 180) -> str:
        result = subprocess.run(
            [*self.base, *args], input=input, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def get(self, *what: str) -> dict[str, Any]:
        """`kubectl get WHAT -o json`, parsed."""
        found: dict[str, Any] = json.loads(self("get", *what, "-o", "json"))
        return found

    def wait(self, what: str, condition: str, timeout: int = 180) -> None:
        self("wait", f"--for={condition}", what, f"--timeout={timeout}s", timeout=timeout + 30)
