"""The command line loads no Kubernetes client before a command runs: the client reads
KUBECONFIG when it is imported, and `run --kubeconfig` sets it first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_building_the_parser_imports_no_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "from spyre_operator.cli import build_parser\n"
        "build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kopf')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
