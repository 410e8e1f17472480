"""Other projects' CRDs as their Go modules ship them (downloaded once by the go command,
its module cache being the install cache), installed on and removed from the test's
control plane: KEDA's ScaledObject (spec.autoscaling), the inference extension's
InferencePool and the Gateway API's standard kinds (spec.routing)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import cluster_sim as sim
import yaml

from spyre_operator.kube.client import ApiError, Kube

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def module_crd(module: str, path: str) -> dict[str, Any]:
    """The CRD at `path` in Go module `module` (path@version)."""
    go = shutil.which("go") or "go"
    found = subprocess.run(
        [go, "mod", "download", "-json", module], capture_output=True, text=True, check=True
    )
    crd: dict[str, Any] = yaml.safe_load((Path(json.loads(found.stdout)["Dir"]) / path).read_text())
    return crd


def crd_state(kube: Kube, name: str) -> str | None:
    """None: absent; else whether it is Established."""
    try:
        crd = kube.request("GET", f"{CRDS}/{name}")
    except ApiError as err:
        if err.not_found:
            return None
        raise
    conditions = crd.get("status", {}).get("conditions") or []
    established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
    return "Established" if established else "Pending"


def install(kube: Kube, crd: dict[str, Any]) -> None:
    name = crd["metadata"]["name"]
    if crd_state(kube, name) is None:
        kube.request("POST", CRDS, crd)
    sim.wait_for(lambda: crd_state(kube, name) == "Established" or None, f"the CRD {name}")


def remove(kube: Kube, name: str) -> None:
    if crd_state(kube, name) is not None:
        kube.request("DELETE", f"{CRDS}/{name}")
    sim.wait_for(lambda: crd_state(kube, name) is None or None, f"no CRD {name}")
