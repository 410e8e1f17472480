"""One synchronous Kubernetes client for the whole operator, built once at start-up.

Requests go through the official client's connection pool but skip its typed models:
objects are plain dicts (JSON in, JSON out), which is what the pure builders produce and
what `decide` compares. Every write is counted (metrics: writes per idle reconcile = 0).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

FIELD_MANAGER = "spyre-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
REQUEST_TIMEOUT = 30.0
# A LIST answered with each object's metadata only (PartialObjectMetadataList); the plain
# list where an API server cannot (it takes the first type it offers).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


class ApiError(Exception):
    """A non-2xx answer of the API server."""

    def __init__(self, status: int, reason: str, body: dict[str, Any] | None = None) -> None:
        self.status, self.reason, self.body = status, reason, body or {}
        super().__init__(f"{status} {reason}: {self.body.get('message', '')}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def kind_unserved(self) -> bool:
        """404 for a create: the API server serves no such kind (its CRD is not installed).
        A namespace that is gone says so in the details (kind `namespaces`)."""
        return self.status == 404 and not (self.body.get("details") or {}).get("kind")

    @property
    def namespace_terminating(self) -> bool:
        """403 for a create in a namespace that is being deleted (with what is in it)."""
        causes = (self.body.get("details") or {}).get("causes") or []
        return self.status == 403 and any(c.get("reason") == "NamespaceTerminating" for c in causes)

    @property
    def refused(self) -> bool:
        """The API server refused the object itself (invalid, or forbidden by a quota or a
        policy): sending the same object again cannot help."""
        return self.status in (400, 403, 422) and not self.namespace_terminating

    @property
    def conflict(self) -> bool:
        """409: AlreadyExists on create, or a stale resourceVersion on update."""
        return self.status == 409


def load_api_client(kubeconfig: str | None = None, pool_size: int = 32) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def cannot_start(kubeconfig: str | None, timeout: float = 5.0) -> str | None:
    """Why the operator could not talk to the API server, in one line (None: it can).
    Checked before kopf starts, which would otherwise log a traceback and retry forever."""
    try:
        api = load_api_client(kubeconfig)
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as err:
        where = kubeconfig or "the in-cluster config or ~/.kube/config"
        return f"cannot load {where}: {one_line(err)}"
    host = api.configuration.host
    try:
        response = api.call_api("GET", f"{host}/version", _request_timeout=timeout)
    except Exception as err:  # urllib3: refused, timed out, TLS, name resolution
        reason = getattr(err, "reason", None) or err
        return f"cannot reach the API server at {host}: {one_line(reason)}"
    if response.status == 401:
        return f"the API server at {host} refused the credentials (401 Unauthorized)"
    return None


def _api_error(status: int, reason: str | None, raw: bytes) -> ApiError:
    """The API server's Status in an error answer (its message, if it is not JSON)."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        parsed = {"message": raw.decode(errors="replace")}
    return ApiError(status, reason or "", parsed if isinstance(parsed, dict) else {})


def one_line(err: object) -> str:
    return " ".join(str(err).split())


# (group/version prefix, plural) of every kind the operator touches.
KINDS = {
    "PersistentVolumeClaim": ("api/v1", "persistentvolumeclaims"),
    "Pod": ("api/v1", "pods"),
    "Service": ("api/v1", "services"),
    "Event": ("api/v1", "events"),
    "Job": ("apis/batch/v1", "jobs"),
    "Deployment": ("apis/apps/v1", "deployments"),
    "NetworkPolicy": ("apis/networking.k8s.io/v1", "networkpolicies"),
    # policy/v1 from Kubernetes 1.21 (and only it from 1.25); 1.20 serves v1beta1, with the
    # same fields for what the operator writes: a Kube talks what `policy_version` found.
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets"),
    "SpyreModel": ("apis/serving.spyre.dev/v1alpha1", "spyremodels"),
    "SpyreCache": ("apis/serving.spyre.dev/v1alpha1", "spyrecaches"),
    "ScaledObject": ("apis/keda.sh/v1alpha1", "scaledobjects"),  # KEDA's (spec.autoscaling)
    # spec.routing: the Gateway API Inference Extension's pool, the Gateway API's route
    # and Gateway (read only), the endpoint picker's identity
    "InferencePool": ("apis/inference.networking.k8s.io/v1", "inferencepools"),
    "HTTPRoute": ("apis/gateway.networking.k8s.io/v1", "httproutes"),
    "Gateway": ("apis/gateway.networking.k8s.io/v1", "gateways"),
    "ServiceAccount": ("api/v1", "serviceaccounts"),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "Node": ("api/v1", "nodes"),  # not in a namespace: watched (capacity of cards) only
}


Kinds = dict[str, tuple[str, str]]


def policy_version(kube: Kube) -> str:
    """The PodDisruptionBudgets' group version to talk: policy/v1 where the cluster serves
    it, else policy/v1beta1 (Kubernetes 1.20)."""
    versions = kube.request("GET", "/apis/policy").get("versions") or []
    served_v1 = any(v.get("groupVersion") == "policy/v1" for v in versions)
    return "policy/v1" if served_v1 else "policy/v1beta1"


def path(
    kind: str,
    namespace: str,
    name: str | None = None,
    sub: str | None = None,
    kinds: Kinds = KINDS,
) -> str:
    prefix, plural = kinds[kind]
    out = f"/{prefix}/namespaces/{namespace}/{plural}"
    if name is not None:
        out += f"/{name}"
    if sub is not None:
        out += f"/{sub}"
    return out


class Kube:
    """Thread-safe: the thread pool of kopf's sync handlers shares one instance."""

    def __init__(self, api: client.ApiClient, policy: str = "policy/v1") -> None:
        """`policy`: the PodDisruptionBudgets' group version (policy_version)."""
        self.api = api
        self.kinds = KINDS | {"PodDisruptionBudget": (f"apis/{policy}", "poddisruptionbudgets")}
        self._lock = threading.Lock()
        self.writes: Counter[str] = Counter()  # "PATCH Deployment" -> count
        self.dry_runs: Counter[str] = Counter()  # "Deployment" -> count (nothing stored)
        self.reads = 0  # GETs (the API request rate of a resync: reads + writes)

    def path(
        self, kind: str, namespace: str, name: str | None = None, sub: str | None = None
    ) -> str:
        return path(kind, namespace, name, sub, self.kinds)

    def served(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` in the version of its kind this client talks."""
        version = self.kinds[obj["kind"]][0].removeprefix("apis/").removeprefix("api/")
        return obj if obj.get("apiVersion") in (None, version) else {**obj, "apiVersion": version}

    def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
        accept: str = "application/json",
    ) -> dict[str, Any]:
        url, headers, data = self._serialize(method, url_path, query, content_type, body, accept)
        if method == "GET":
            with self._lock:
                self.reads += 1
        response = self.api.call_api(
            method, url, header_params=headers, body=data, _request_timeout=REQUEST_TIMEOUT
        )
        raw = response.read()
        if response.status >= 400:
            raise _api_error(response.status, response.reason, raw)
        parsed = json.loads(raw) if raw else {}
        return parsed if isinstance(parsed, dict) else {}

    def _serialize(
        self,
        method: str,
        url_path: str,
        query: dict[str, str] | None,
        content_type: str = "application/json",
        body: Any = None,
        accept: str = "application/json",
    ) -> tuple[str, dict[str, str], Any]:
        _, url, headers, data, _ = self.api.param_serialize(
            method=method,
            resource_path=url_path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": accept},
            body=body,
            auth_settings=["BearerToken"],
        )
        return url, headers, data

    def _count(self, method: str, kind: str) -> None:
        with self._lock:
            self.writes[f"{method} {kind}"] += 1

    # ----- reads -----------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.path(kind, namespace, name))
        except ApiError as err:
            if err.not_found:
                return None
            raise

    def list(
        self, kind: str, namespace: str, selector: str, consistent: bool = False
    ) -> list[dict[str, Any]]:
        """`consistent`: what the API server holds now, even where a store could answer
        (indexed.IndexedKube)."""
        found = self.request("GET", self.path(kind, namespace), query={"labelSelector": selector})
        items: list[dict[str, Any]] = found.get("items", [])
        return items

    def log_tail(
        self,
        namespace: str,
        pod: str,
        container: str,
        lines: int | None,
        limit: int,
        timeout: float,
    ) -> str:
        """The end of a container's log, at most `lines` lines (None: from its start) and
        `limit` bytes. The API server fetches it from the pod's kubelet, so one attempt
        within `timeout` (the client's pool would try a GET that timed out three more
        times)."""
        query = {"container": container, "limitBytes": str(limit)}
        if lines is not None:
            query["tailLines"] = str(lines)
        # As kubectl asks: the log is text/plain, an error a JSON Status (text/plain alone: 406).
        url, headers, _ = self._serialize(
            "GET", self.path("Pod", namespace, pod, "log"), query, accept="application/json, */*"
        )
        response = self.api.rest_client.pool_manager.request(
            "GET",
            url,
            headers=headers,
            timeout=urllib3.Timeout(total=timeout),
            retries=False,
            preload_content=False,
        )
        raw = response.read()
        if response.status >= 400:
            raise _api_error(response.status, response.reason, raw)
        return raw.decode(errors="replace")

    def watch(self, url_path: str, query: dict[str, str], timeout: float) -> Iterator[Any]:
        """The events of a watch request (`watch=true` in `query`), parsed, until the API
        server ends it; ApiError if it refuses to start (410: the resourceVersion is gone)."""
        url, headers, _ = self._serialize("GET", url_path, query)
        # (connect, read): the stream may stay open for minutes, silent between events
        response = self.api.call_api(
            "GET", url, header_params=headers, _request_timeout=(REQUEST_TIMEOUT, timeout)
        )
        try:
            if response.status >= 400:
                raw = response.read()
                raise ApiError(response.status, response.reason or "", json.loads(raw or b"{}"))
            for line in iter_resp_lines(response.response):  # urllib3's, not preloaded
                if line:
                    yield json.loads(line)
        finally:
            response.response.release_conn()

    # ----- writes ----------------------------------------------------------------
    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self._count("POST", obj["kind"])
        return self.request("POST", self.path(obj["kind"], meta["namespace"]), self.served(obj))

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply as the operator's field manager, taking over conflicts."""
        meta = obj["metadata"]
        self._count("APPLY", obj["kind"])
        return self.request(
            "PATCH",
            self.path(obj["kind"], meta["namespace"], meta["name"]),
            self.served(obj),
            content_type=APPLY,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        content_type: str = MERGE,
        sub: str | None = None,
    ) -> dict[str, Any]:
        self._count("PATCH", kind + (f"/{sub}" if sub else ""))
        return self.request(
            "PATCH",
            self.path(kind, namespace, name, sub),
            body,
            content_type=content_type,
            query={"fieldManager": FIELD_MANAGER},
        )

    def delete(self, kind: str, namespace: str, name: str, resource_version: str = "") -> None:
        """Delete (its dependents, e.g. a Job's pods, by the garbage collector in the
        background); with resource_version, only that version of it (409 otherwise).
        Already gone is fine."""
        self._count("DELETE", kind)
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if resource_version:
            options["preconditions"] = {"resourceVersion": resource_version}
        try:
            self.request("DELETE", self.path(kind, namespace, name), options)
        except ApiError as err:
            if not err.not_found:
                raise

    def dry_run(self, obj: dict[str, Any]) -> None:
        """Would the API server create this object? A POST with dryRun=All: validation and
        admission (quotas, limit ranges, policy webhooks) run, nothing is stored. ApiError
        says why not (409: it exists)."""
        meta = obj["metadata"]
        with self._lock:
            self.dry_runs[obj["kind"]] += 1
        url = self.path(obj["kind"], meta["namespace"])
        self.request("POST", url, self.served(obj), query={"dryRun": "All"})

    def total_writes(self) -> int:
        with self._lock:
            return sum(self.writes.values())
