"""`spyre-operator check-install`: what the chart's `helm test` pod runs.

From inside the cluster: a running operator pod answers on its health port (kopf's
liveness endpoint), and the API server serves SpyreModels (the CRD is installed and
established). Each check says what it saw; a failure says what to look at.
"""

from __future__ import annotations

import argparse
import time
import urllib.request
from typing import TYPE_CHECKING, Any

from spyre_operator.api.names import API_VERSION, CACHE_PLURAL, GROUP, PLURAL

if TYPE_CHECKING:
    # Imported when the command runs: the CLI must not load the Kubernetes client before
    # `run` has set KUBECONFIG (the client reads it at import).
    from spyre_operator.kube.client import Kube


class CheckFailed(Exception):
    """A check that did not pass, with what it saw."""


def _health_url(pod: dict[str, Any], port: int) -> str:
    ip = pod["status"]["podIP"]
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/healthz"


def _answering_pod(kube: Kube, namespace: str, selector: str, port: int) -> tuple[str, str]:
    """(pod name, URL) of an operator pod whose health endpoint answers 200; else raises
    with what was seen."""
    pods = kube.list("Pod", namespace, selector)
    if not pods:
        raise CheckFailed(f"no pod in namespace {namespace} matches {selector}")
    seen = []
    for pod in pods:
        name, status = pod["metadata"]["name"], pod.get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP"):
            seen.append(f"{name} is {status.get('phase', 'not scheduled')}")
            continue
        url = _health_url(pod, port)
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return name, url
                seen.append(f"{url} answered {response.status}")
        except OSError as err:
            seen.append(f"{url}: {err}")
    raise CheckFailed("; ".join(seen))


def operator_answers(
    kube: Kube, namespace: str, selector: str, port: int, timeout: float
) -> tuple[str, str]:
    """Waits up to `timeout` seconds for an operator pod to answer (it may be starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _answering_pod(kube, namespace, selector, port)
        except CheckFailed as err:
            if time.monotonic() >= deadline:
                raise CheckFailed(f"the operator does not answer on port {port}: {err}") from err
        time.sleep(2)


def api_is_served(kube: Kube, namespace: str) -> None:
    from spyre_operator.kube.client import ApiError

    for plural in (PLURAL, CACHE_PLURAL):
        try:
            kube.request(
                "GET", f"/apis/{API_VERSION}/namespaces/{namespace}/{plural}", query={"limit": "1"}
            )
        except ApiError as err:
            hint = (
                f"install the CRD {plural}.{GROUP} (the chart's crds/ folder; Helm installs it "
                "only with the chart's first install and skips it with --skip-crds: "
                "kubectl apply -f crds/)"
                if err.not_found
                else "see the API server's message"
            )
            raise CheckFailed(f"listing {plural}.{API_VERSION} failed: {err}: {hint}") from err


def check_install(args: argparse.Namespace) -> int:
    from spyre_operator.kube.client import ApiError, Kube, load_api_client

    kube = Kube(load_api_client(args.kubeconfig))
    try:
        pod, url = operator_answers(kube, args.namespace, args.selector, args.port, args.timeout)
        print(f"ok: the operator pod {pod} answers on {url}")
        api_is_served(kube, args.namespace)
        print(f"ok: the API server serves {PLURAL} and {CACHE_PLURAL}.{API_VERSION}")
    except ApiError as err:  # e.g. the test's Role is missing: listing pods is forbidden
        print(f"FAILED: reading the operator's pods: {err}")
        return 1
    except CheckFailed as err:
        print(f"FAILED: {err}")
        return 1
    return 0


def register(sub: Any) -> None:
    check = sub.add_parser(
        "check-install",
        help="check an installed operator from inside the cluster (the chart's helm test)",
        description="A running operator pod answers on its health port, and the API server "
        "serves SpyreModels and SpyreCaches. Exit 0, or 1 with what is wrong.",
    )
    check.add_argument("--namespace", "-n", required=True, help="the operator's namespace")
    check.add_argument(
        "--selector", "-l", required=True, help="label selector of the operator pods"
    )
    check.add_argument("--port", type=int, required=True, help="the operator's health port")
    check.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for an answer")
    check.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG)")
    check.set_defaults(func=check_install)
