"""The command line loads no Kubernetes client before a command runs: the client reads
KUBECONFIG when it is imported, and `run --kubeconfig` sets it first. Nor gRPC: only the
node's device plugin process needs it (the dev extra), not the operator's image."""

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
        "heavy = ('kubernetes', 'kopf', 'grpc')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
