"""The steps every install shares: run a command with progress, fail with what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class InstallError(RuntimeError):
    def __init__(self, step: str, detail: str, hint: str) -> None:
        super().__init__(f"step '{step}' failed: {detail}\n  what to do: {hint}")
        self.step = step


Log = Callable[[str], None]
Explain = Callable[[list[str]], str]


def say(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def run(
    step: str,
    cmd: Sequence[str],
    hint: str,
    log: Log,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    explain: Explain | None = None,
) -> None:
    """Run a command, streaming its output as progress; raise InstallError on failure
    (its detail from `explain` of the output's last lines, when given)."""
    log(f"[{step}] $ {' '.join(cmd)}")
    started = time.monotonic()
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:
        raise InstallError(step, f"cannot run {cmd[0]}: {exc}", hint) from exc
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = [*tail[-39:], line.rstrip()]
        print(
            f"   [{step} {time.monotonic() - started:5.0f}s] {line.rstrip()}",
            file=sys.stderr,
            flush=True,
        )
    if proc.wait() != 0:
        detail = f"`{' '.join(cmd)}` exited with {proc.returncode}"
        if explain is not None:
            detail = explain(tail)
        raise InstallError(step, detail + "; last output:\n    " + "\n    ".join(tail[-20:]), hint)


def require_root(step: str) -> None:
    if os.geteuid() != 0:
        raise InstallError(
            step,
            "installing Debian packages needs root",
            "run `sudo spyre-operator cluster install`, or set "
            "KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver",
        )


def missing_packages(names: Sequence[str]) -> list[str]:
    return [
        name
        for name in names
        if subprocess.run(["dpkg", "-s", name], capture_output=True, check=False).returncode
    ]


def apt_install(packages: Sequence[str], log: Log) -> None:
    require_root("apt-get install")
    run("apt-get update", ["apt-get", "update"], "run `apt-get update` by hand", log)
    run(
        "apt-get install",
        ["apt-get", "install", "-y", "--no-install-recommends", *packages],
        "check the package names with `apt-cache policy`",
        log,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
