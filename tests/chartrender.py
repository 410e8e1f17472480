"""The chart rendered by `helm template`: for the chart tests, and for the integration tests,
which run the operator as the chart's ServiceAccount under the chart's roles."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from spyre_devcluster.tools import tool

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "spyre-operator"
RELEASE = "spyre"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [tool("helm"), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def set_args(values: dict[str, Any] | None) -> list[str]:
    """Values as `--set-json` arguments (exact types, no --set string guessing)."""
    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def template(
    namespace: str,
    values: dict[str, Any] | None = None,
    release: str = RELEASE,
    tests: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart (templates only, not crds/; the `helm test` objects
    only with `tests`); never raises."""
    args = ["template", release, str(CHART), "--namespace", namespace, *set_args(values)]
    return helm(*args, *([] if tests else ["--skip-tests"]), check=False)


def render(
    namespace: str,
    values: dict[str, Any] | None = None,
    release: str = RELEASE,
    tests: bool = False,
) -> list[dict[str, Any]]:
    """The chart's templates (not crds/) as a list of objects."""
    result = template(namespace, values, release, tests)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig for the admin's cluster whose only credential is `token`."""
    cluster = yaml.safe_load(admin_kubeconfig.read_text())["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [cluster],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "sa"}}],
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path
