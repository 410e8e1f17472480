"""The operator as the chart's ServiceAccount, under the roles the chart renders for
rbac.mode=namespaced (one Role per watched namespace), not as the tests' admin: a call the
chart does not grant is refused, and conftest.py fails the test on it (tests/auditlib.py)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from chartrender import render, token_kubeconfig
from spyre_operator.kube.client import ApiError, Kube

RELEASE_NAMESPACE = "spyre-system"  # where the chart's ServiceAccount lives
WATCHED = "watched"  # the namespace the chart is rendered for; each test's replaces it
RBAC_KINDS = {
    "ServiceAccount": "api/v1/namespaces/{namespace}/serviceaccounts",
    "Role": "apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    "RoleBinding": "apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    "ClusterRole": "apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}
TOKEN_SECONDS = 4 * 3600  # one token per operator start; longer than any test


@functools.cache
def rendered() -> tuple[dict[str, Any], ...]:
    docs = render(RELEASE_NAMESPACE, {"rbac.mode": "namespaced", "watchNamespaces": [WATCHED]})
    return tuple(d for d in docs if d["kind"] in RBAC_KINDS)


def service_account() -> str:
    (account,) = (d["metadata"]["name"] for d in rendered() if d["kind"] == "ServiceAccount")
    return account


def user() -> str:
    return f"system:serviceaccount:{RELEASE_NAMESPACE}:{service_account()}"


def _apply(admin: Kube, obj: dict[str, Any]) -> None:
    base = RBAC_KINDS[obj["kind"]].format(namespace=obj["metadata"].get("namespace"))
    admin.request(
        "PATCH",
        f"/{base}/{obj['metadata']['name']}",
        yaml.safe_dump(obj),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "helm", "force": "true"},
    )


def _release(admin: Kube, admin_kubeconfig: Path) -> None:
    """The chart's objects outside the watched namespaces, once per control plane."""
    if admin_kubeconfig in _RELEASED:
        return
    try:
        admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": RELEASE_NAMESPACE}})
    except ApiError as err:
        if not err.conflict:
            raise
    for doc in rendered():
        if doc["metadata"].get("namespace") != WATCHED:
            _apply(admin, doc)
    _RELEASED.add(admin_kubeconfig)


_RELEASED: set[Path] = set()


def operator_kubeconfig(
    admin: Kube, admin_kubeconfig: Path, namespaces: list[str], path: Path
) -> Path:
    """The chart's roles in `namespaces` and a kubeconfig whose only credential is a fresh
    token of its ServiceAccount (from the TokenRequest API)."""
    _release(admin, admin_kubeconfig)
    for namespace in namespaces:
        for doc in rendered():
            if doc["metadata"].get("namespace") == WATCHED:
                copied = copy.deepcopy(doc)
                copied["metadata"]["namespace"] = namespace
                _apply(admin, copied)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": TOKEN_SECONDS}}  # fmt: skip
    account = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/serviceaccounts/{service_account()}"
    token = admin.request("POST", f"{account}/token", request)["status"]["token"]
    return token_kubeconfig(admin_kubeconfig, token, path)
