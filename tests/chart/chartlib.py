"""Helpers of the chart tests: the chart's paths, `helm` runs (chartrender, shared with the
integration tests), the Lua health check."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from chartrender import (
    CHART,
    RELEASE,
    ROOT,
    find,
    helm,
    render,
    set_args,
    template,
    token_kubeconfig,
)  # fmt: skip

# the shared helpers, for the chart tests' imports
__all__ = ["CHART", "RELEASE", "ROOT", "find", "helm", "render", "set_args", "template"]

CHART_CRDS = CHART / "crds"
HEALTH_LUA = ROOT / "deploy" / "argocd" / "spyremodel-health.lua"
ARGOCD_CM_PATCH = ROOT / "deploy" / "argocd" / "argocd-cm-patch.yaml"
LUA = "lua5.1"  # Argo CD runs health scripts with gopher-lua (Lua 5.1)

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def lua_literal(value: Any) -> str:
    """A Python JSON value as a Lua table constructor (what Argo CD hands the script)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"no Lua literal for {value}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are valid Lua escapes for this text
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        items = ", ".join(f"[{json.dumps(k)}] = {lua_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def lua_interpreter() -> str:
    found = shutil.which(LUA)
    if found is None:
        raise AssertionError(
            f"{LUA} is not installed: the Argo CD health check needs a Lua interpreter "
            "(Debian: `apt-get install lua5.1`)"
        )
    return found


def run_health_check(obj: dict[str, Any]) -> dict[str, str]:
    """Run the health script the way Argo CD does: `obj` global, the chunk returns hs."""
    harness = (
        f"obj = {lua_literal(obj)}\n"
        f"local hs = assert(loadfile({json.dumps(str(HEALTH_LUA))}))()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    result = subprocess.run(
        [lua_interpreter(), "-"], input=harness, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, f"the health script failed:\n{result.stderr}"
    status, _, message = result.stdout.partition("\n")
    return {"status": status, "message": message}


@dataclass
class Installed:
    namespace: str  # the release namespace (the operator's ServiceAccount lives there)
    service_account: str
    watched: list[str]  # empty: every namespace
    docs: list[dict[str, Any]]  # everything the chart rendered (only RBAC_KINDS applied)

    @property
    def operator_args(self) -> list[str]:
        """The args of the chart's operator container (`run ...`)."""
        (deploy,) = find(self.docs, "Deployment")
        args: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        return args

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
WEBHOOK_KINDS = {"Secret", "ValidatingWebhookConfiguration"}


def install_rbac(
    kubectl: Kubectl, namespace: str, values: dict[str, Any], webhook_url: str | None = None
) -> Iterator[Installed]:
    """Apply the chart's ServiceAccount and RBAC (a fresh release name: the cluster-scoped
    roles of different tests never collide); removes the cluster-scoped ones afterwards.
    With `webhook_url`, also the webhook's Secret and configuration, which then calls the
    operator at that URL (on the host) instead of through its Service."""
    release = f"r{uuid.uuid4().hex[:8]}"
    docs = render(namespace, values, release=release)
    kinds = RBAC_KINDS | (WEBHOOK_KINDS if webhook_url else set())
    rbac = [d for d in docs if d["kind"] in kinds]
    for configuration in find(rbac, "ValidatingWebhookConfiguration"):
        for hook in configuration["webhooks"]:
            hook["clientConfig"] = {"url": webhook_url}
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    (account,) = find(docs, "ServiceAccount")
    try:
        yield Installed(
            namespace, account["metadata"]["name"], list(values.get("watchNamespaces", [])), docs
        )
    finally:
        cluster_scoped = [
            d for d in rbac if d["kind"].startswith("Cluster") or d["kind"] in WEBHOOK_KINDS
        ]  # the webhook's Secret goes with the test's namespace; deleting it again is harmless
        kubectl("delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(cluster_scoped))


def service_account_kubeconfig(
    kubectl: Kubectl, admin_kubeconfig: Path, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig whose only credential is a token of the ServiceAccount (a real one,
    from the TokenRequest API)."""
    token = kubectl("create", "token", account, "-n", namespace, "--duration=2h").stdout.strip()
    return token_kubeconfig(admin_kubeconfig, token, path)
