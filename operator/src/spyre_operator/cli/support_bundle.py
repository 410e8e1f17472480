"""`spyre-operator support-bundle`: what a bug report needs, in one tar.gz.

Versions (this CLI's, the API server's, the CRDs' served versions), the SpyreModels and
SpyreCaches with their status, the namespaces' Events, the objects the operator made
(Jobs, Deployments, Services, claims, PodDisruptionBudgets, NetworkPolicies, pods), each
pod's log from its start (a serving pod's start-up report, a compile's summary), and the
operator's pods and logs. Never a Secret: no Secret is ever read, and `env` values whose
name looks like a credential are replaced wherever they appear. What could not be read
(a 403, a pod whose kubelet does not answer) is listed in `errors.txt`, never a stop.
"""

from __future__ import annotations

import argparse
import io
import re
import tarfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml

from spyre_operator import __version__
from spyre_operator.api.names import GROUP, PLURAL

if TYPE_CHECKING:
    from spyre_operator.kube.client import Kube

MANAGED = "app.kubernetes.io/managed-by=spyre-operator"
CHILD_KINDS = (
    "Job",
    "Deployment",
    "Service",
    "PersistentVolumeClaim",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "Pod",
)
LOG_LIMIT = 1024 * 1024  # bytes of each pod's log, from its start
OPERATOR_LOG_LINES = 5000
LOG_TIMEOUT = 10.0
CREDENTIAL = re.compile(r"(?i)token|key|secret|passw|credential|auth")
REDACTED = "<redacted by support-bundle>"


def credentials(obj: Any) -> set[str]:
    """The plain `value`s of every `env` entry in `obj` whose name looks like a credential
    (spec.env may carry one; a Secret reference holds no value)."""
    if isinstance(obj, list):
        return set().union(*(credentials(item) for item in obj))
    if not isinstance(obj, dict):
        return set()
    found = set().union(*(credentials(v) for v in obj.values()))
    for entry in obj.get("env") or []:
        if isinstance(entry, dict) and entry.get("value") and CREDENTIAL.search(entry["name"]):
            found.add(entry["value"])
    return found


def strip_managed_fields(obj: Any) -> Any:
    if isinstance(obj, list):
        return [strip_managed_fields(item) for item in obj]
    if isinstance(obj, dict):
        return {k: strip_managed_fields(v) for k, v in obj.items() if k != "managedFields"}
    return obj


class Bundle:
    """Files of the tar.gz, and what could not be read."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.errors: list[str] = []
        self.credentials: set[str] = set()  # replaced wherever they appear, at the end

    def add(self, name: str, data: Any) -> None:
        if isinstance(data, str):
            self.files[name] = data
            return
        self.credentials |= credentials(data)
        self.files[name] = yaml.safe_dump(strip_managed_fields(data), sort_keys=False)

    def attempt(self, what: str, read: Callable[..., Any], *args: Any) -> Any:
        """`read(*args)`, or None with `what` failed listed in errors.txt."""
        from spyre_operator.kube.client import ApiError, one_line

        try:
            return read(*args)
        except (ApiError, OSError) as err:
            self.errors.append(f"{what}: {one_line(err)}")
            return None

    def write(self, path: str) -> None:
        if self.errors:
            self.add("errors.txt", "\n".join(self.errors) + "\n")
        with tarfile.open(path, "w:gz") as tar:
            for name, text in sorted(self.files.items()):
                # A credential is also copied into annotations, other env values (a Job's
                # compile config), logs: replaced wherever it appears.
                for value in sorted(self.credentials, key=len, reverse=True):
                    text = text.replace(value, REDACTED)
                data = text.encode()
                info = tarfile.TarInfo(f"support-bundle/{name}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(data))


def _versions(kube: Kube, bundle: Bundle) -> None:
    versions: dict[str, Any] = {"spyreOperatorCli": __version__}
    versions["apiServer"] = bundle.attempt(
        "the API server's version", kube.request, "GET", "/version"
    )
    for plural in (PLURAL, "spyrecaches"):
        crd = bundle.attempt(
            f"the CRD {plural}.{GROUP}",
            kube.request,
            "GET",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}",
        )
        if crd:
            served = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
            versions[f"crd/{plural}"] = {"served": served, "labels": crd["metadata"].get("labels")}
    bundle.add("versions.yaml", versions)


def _pod_logs(
    kube: Kube, bundle: Bundle, folder: str, pods: list[dict[str, Any]], lines: int | None
) -> None:
    for pod in pods:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for container in [c["name"] for c in pod["spec"].get("containers", [])]:
            what = f"the log of {namespace}/{name} ({container})"
            read = (namespace, name, container, lines, LOG_LIMIT, LOG_TIMEOUT)
            log = bundle.attempt(what, kube.log_tail, *read)
            if log is not None:
                bundle.add(f"{folder}/logs/{name}.{container}.log", log)


def _namespace(kube: Kube, bundle: Bundle, namespace: str) -> int:
    """The namespace's SpyreModels, SpyreCaches, Events and the operator's objects; returns
    how many SpyreModels and SpyreCaches it has."""
    found = 0
    for kind in ("SpyreModel", "SpyreCache"):
        items = bundle.attempt(f"{kind}s in {namespace}", kube.list, kind, namespace, "")
        found += len(items or [])
        bundle.add(f"{namespace}/{kube.kinds[kind][1]}.yaml", items or [])
    events = bundle.attempt(f"Events in {namespace}", kube.list, "Event", namespace, "")
    bundle.add(f"{namespace}/events.yaml", events or [])
    for kind in CHILD_KINDS:
        items = bundle.attempt(f"{kind}s in {namespace}", kube.list, kind, namespace, MANAGED)
        bundle.add(f"{namespace}/{kube.kinds[kind][1]}.yaml", items or [])
        if kind == "Pod" and items:
            _pod_logs(kube, bundle, namespace, items, None)
    return found


def _namespaces(kube: Kube, args: argparse.Namespace) -> list[str]:
    if args.namespace:
        return sorted(set(args.namespace))
    found = kube.request("GET", f"/apis/{GROUP}/v1alpha1/{PLURAL}").get("items", [])
    caches = kube.request("GET", f"/apis/{GROUP}/v1alpha1/spyrecaches").get("items", [])
    return sorted({o["metadata"]["namespace"] for o in [*found, *caches]})


def support_bundle(args: argparse.Namespace) -> int:
    from spyre_operator.kube.client import ApiError, Kube, load_api_client, one_line, policy_version

    api = load_api_client(args.kubeconfig)
    kube, bundle = Kube(api, policy_version(Kube(api))), Bundle()
    _versions(kube, bundle)
    try:
        namespaces = _namespaces(kube, args)
    except ApiError as err:
        print(
            f"FAILED: listing SpyreModels in every namespace: {one_line(err)} (name them with -n)"
        )
        return 1
    objects = sum(_namespace(kube, bundle, ns) for ns in namespaces)
    operator = f"operator/{args.operator_namespace}"
    pods = bundle.attempt(
        "the operator's pods",
        kube.list,
        "Pod",
        args.operator_namespace,
        args.operator_selector,
    )
    bundle.add(f"{operator}/pods.yaml", pods or [])
    if not pods:
        bundle.errors.append(
            f"no operator pod in {args.operator_namespace} matches {args.operator_selector} "
            "(set --operator-namespace and --operator-selector)"
        )
    _pod_logs(kube, bundle, operator, pods or [], OPERATOR_LOG_LINES)
    bundle.write(args.output)
    print(
        f"wrote {args.output}: {len(namespaces)} namespaces, {objects} SpyreModels and "
        f"SpyreCaches, {len(bundle.files)} files; {len(bundle.errors)} things could not be "
        "read (errors.txt). No Secret was read; look through it before you send it."
    )
    return 0


def register(sub: Any) -> None:
    command = sub.add_parser(
        "support-bundle",
        help="collect what a bug report needs into a tar.gz (no Secrets)",
        description="Versions, SpyreModels and SpyreCaches with status, Events, the objects "
        "and pods the operator made with their logs, and the operator's pods and logs, into "
        "one tar.gz. No Secret is read; env values named like credentials are replaced.",
    )
    command.add_argument(
        "--namespace",
        "-n",
        action="append",
        help="a namespace to collect (repeatable; default: every namespace with a SpyreModel "
        "or SpyreCache)",
    )
    command.add_argument(
        "--operator-namespace", default="spyre-system", help="the operator's namespace"
    )
    command.add_argument(
        "--operator-selector",
        default="app.kubernetes.io/name=spyre-operator",
        help="label selector of the operator's pods",
    )
    command.add_argument(
        "--output",
        "-o",
        default=time.strftime("spyre-support-%Y%m%dT%H%M%SZ.tar.gz", time.gmtime()),
        help="the tar.gz to write (default: spyre-support-<UTC time>.tar.gz)",
    )
    command.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster)")
    command.set_defaults(func=support_bundle)
