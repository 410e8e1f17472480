"""`spyre-operator run` that cannot talk to an API server: one line and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}"}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
users: [{{name: u, user: {{token: t}}}}]
"""


def closed_port() -> int:
    """A port nothing listens on (bound, never listened: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "spyre_operator", "run", "--kubeconfig", str(kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot load {path}: Invalid kube-config file. No configuration found."),
        ("clusters: [", "cannot load {path}: while parsing a flow node"),
        ("kind: Config\n", "cannot load {path}: Invalid kube-config file."),
        (KUBECONFIG, "cannot reach the API server at https://127.0.0.1:{port}: "),
    ],
    ids=["missing", "not-yaml", "no-context", "refused"],
)
def test_run_without_an_api_server_exits_with_one_line(
    tmp_path: Path, content: str | None, says: str
) -> None:
    path, port = tmp_path / "kubeconfig", closed_port()
    if content is not None:
        path.write_text(content.format(port=port))
    done = run(path)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("spyre-operator run: " + says.format(path=path, port=port)), line
