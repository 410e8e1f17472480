"""Rules on the Kubernetes fields a spec passes on to the pods and the Service (resources,
labels, placement, images, env, network access): what the API server would refuse, said
before anything is created, with Kubernetes' own rule and the fix."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from spyre_operator.api import runtimes
from spyre_operator.api.base import cpu_cores, quantity_value
from spyre_operator.api.imageref import IMAGE_NAME_MAX, IMAGE_REF
from spyre_operator.api.k8s_types import EnvFieldRef, IpBlock, Resources
from spyre_operator.api.labels import (
    annotation_problems,
    key_problems,
    label_problems,
    qualified_name,
)
from spyre_operator.api.names import GROUP
from spyre_operator.api.placement_rules import selector_problems
from spyre_operator.api.problem import Problem, join_path, shown
from spyre_operator.api.spec import SpyreModelSpec
from spyre_runtime import contract

ACCELERATOR_RESOURCE = re.compile(r"^ibm\.com/(spyre|aiu)_")
# Labels the operator (selectors, identity) and the Deployment and Job controllers set on
# the pods: podLabels may not replace them. Annotations under the operator's prefix are its.
RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "pod-template-hash",
    "controller-uid",
    "job-name",
)


RESERVED_PREFIXES = (f"{GROUP}/", "batch.kubernetes.io/")


# Container resources without a domain (IsStandardContainerResourceName); others are
# extended resources, a qualified name with a domain (example.com/device).
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


RESOURCE_RULE = (
    "use cpu, memory, ephemeral-storage or hugepages-<size>, or an extended resource with "
    "a domain (example.com/device)"
)


# Kubernetes counts a quantity as an int64 of its smallest unit (milli).
QUANTITY_MAX = (2**63 - 1) // 1000


def extra_env(s: SpyreModelSpec) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, e in enumerate(s.env):
        path = f"spec.env[{i}]"
        if e.name in seen:
            yield Problem(f"{path}.name", f"{e.name} is set twice: keep one")
        seen.add(e.name)
        if e.name.endswith(runtimes.MODEL_CONFIG_FILE) and runtimes.is_reserved_env(e.name):
            yield Problem(
                f"{path}.name",
                f"{e.name} replaces vLLM-Spyre's known-config registry, whose device "
                "settings shape the compiled graphs, and the file's content cannot be part "
                "of the cache key: set batching.continuous.maxBatchTkvLimit or "
                "numGpuBlocksOverride instead",
            )
        elif e.name == contract.TORCHINDUCTOR_CACHE_DIR:
            yield Problem(
                f"{path}.name",
                f"{e.name} is set by the operator: it is inductor's cache in the cache "
                "key's directory, which the compile Job fills for the serving pods: remove it",
            )
        elif runtimes.is_reserved_env(e.name):
            yield Problem(
                f"{path}.name",
                f"{e.name} is set by the operator or by vLLM-Spyre from spec fields and may "
                "change the compiled graphs (docs/api.md lists them): set the field instead",
            )
        if e.value is not None and e.value_from is not None:
            yield Problem(path, "set value or valueFrom, not both")
        if e.value_from and len(e.value_from.to_k8s()) != 1:
            yield Problem(
                f"{path}.valueFrom", "set exactly one of secretKeyRef, configMapKeyRef, fieldRef"
            )
        if e.value_from and e.value_from.field_ref:
            yield from _field_ref_problems(f"{path}.valueFrom.fieldRef", e.value_from.field_ref)


# The pod fields Kubernetes passes to an env var (validEnvDownwardAPIFieldPathExpressions),
# besides one label or annotation: metadata.labels['KEY'], metadata.annotations['KEY'].
DOWNWARD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.podIP",
    "status.podIPs",
)


_SUBSCRIPT = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]", re.DOTALL)


def _field_ref_problems(where: str, ref: EnvFieldRef) -> Iterator[Problem]:
    if ref.api_version not in (None, "v1"):
        yield Problem(
            f"{where}.apiVersion",
            f"{shown(ref.api_version)}: a pod's fields are v1: use v1, or leave it out",
        )
    subscript = _SUBSCRIPT.fullmatch(ref.field_path)
    if subscript:
        what = "a label" if subscript[1] == "labels" else "an annotation"
        yield from key_problems(f"{where}.fieldPath", subscript[2], what)
    elif ref.field_path not in DOWNWARD_FIELDS:
        yield Problem(
            f"{where}.fieldPath",
            f"{shown(ref.field_path)} is not a field Kubernetes passes to env: use one of "
            f"{', '.join(DOWNWARD_FIELDS)}, metadata.labels['KEY'] or "
            "metadata.annotations['KEY']",
        )


def _resource_name_problem(name: str) -> str | None:
    """What Kubernetes says against a container resource name (validateContainerResourceName),
    or None."""
    if "/" not in name:
        if name in STANDARD_RESOURCES or name.startswith("hugepages-"):
            return None
        return f"{shown(name)} is not a container resource: {RESOURCE_RULE}"
    if not qualified_name(name) or name.startswith("requests."):
        return f"{shown(name)} is not a resource name: {RESOURCE_RULE}"
    return None


def _extended(name: str) -> bool:
    """An extended resource (a device plugin's): whole units, requests equal to limits."""
    return "/" in name and "kubernetes.io/" not in name


def _overcommitable(name: str) -> bool:
    """Kubernetes' IsOvercommitAllowed: a request below its limit (not hugepages, not
    extended resources)."""
    return not (_extended(name) or name.startswith("hugepages-"))


def _resource_problems(path: str, res: Resources | None) -> Iterator[Problem]:
    if res is None:
        return
    for kind, amounts in (("limits", res.limits), ("requests", res.requests)):
        for name, amount in amounts.items():
            where = join_path(path, kind, name)
            bad_name = _resource_name_problem(name)
            value = quantity_value(amount)
            if ACCELERATOR_RESOURCE.match(name):
                yield Problem(where, "Spyre cards are requested with spec.accelerator: remove it")
            elif bad_name:
                yield Problem(where, bad_name)
            elif value > QUANTITY_MAX:
                yield Problem(where, f"{amount} is more than Kubernetes counts: use e.g. 8 or 64Gi")
            elif name == "cpu":
                try:
                    cpu_cores(amount)
                except ValueError:
                    yield Problem(where, f"use cores (8) or millicores (7500m), got {amount}")
            elif _extended(name) and value.denominator != 1:
                yield Problem(where, f"{name} is counted in whole units, got {amount}")
    for name, amount in res.requests.items():
        limit = res.limits.get(name)
        where = join_path(path, "requests", name)
        if _resource_name_problem(name) or ACCELERATOR_RESOURCE.match(name):
            continue
        if limit is not None and quantity_value(amount) > quantity_value(limit):
            yield Problem(
                where,
                f"{amount} is more than the limit {limit}: a container may not request more "
                "than it may use; raise limits or lower requests",
            )
        elif not _overcommitable(name) and (
            limit is None or quantity_value(amount) != quantity_value(limit)
        ):
            yield Problem(
                where,
                f"{name} cannot be overcommitted: set limits.{name} to the same amount ({amount})",
            )

    named = set(res.limits) | set(res.requests)
    if any(n.startswith("hugepages-") for n in named) and not named & {"cpu", "memory"}:
        yield Problem(
            join_path(path, "limits"),
            "hugepages need cpu or memory set too (Kubernetes refuses hugepages alone): add "
            "e.g. limits.memory",
        )


def resources(s: SpyreModelSpec) -> Iterator[Problem]:
    yield from _resource_problems("spec.resources", s.resources)
    yield from _resource_problems("spec.cache.compile.resources", s.cache.compile.resources)


def pod_metadata(s: SpyreModelSpec) -> Iterator[Problem]:
    yield from label_problems("spec.podLabels", s.pod_labels)
    for key in s.pod_labels:
        if key in RESERVED_LABELS or key.startswith(RESERVED_PREFIXES):
            yield Problem(
                join_path("spec.podLabels", key),
                f"{key} is set by the operator or by Kubernetes (it selects or identifies the "
                "pods): use a key of your own",
            )
    yield from annotation_problems("spec.podAnnotations", s.pod_annotations)
    for key in s.pod_annotations:
        if key.startswith(f"{GROUP}/"):
            yield Problem(
                join_path("spec.podAnnotations", key),
                f"keys under {GROUP}/ are the operator's: use a key of your own",
            )


def image(s: SpyreModelSpec) -> Iterator[Problem]:
    ref = s.image
    if ref is None:
        return
    if ref != ref.strip():
        yield Problem(
            "spec.image",
            f"{shown(ref)} has leading or trailing whitespace, which Kubernetes refuses in a "
            "pod: remove it",
        )
    elif not (match := IMAGE_REF.fullmatch(ref)) or len(match["name"]) > IMAGE_NAME_MAX:
        yield Problem(
            "spec.image",
            f"{shown(ref)} is not an image reference: [registry[:port]/]name[:tag][@digest], the "
            "name in lowercase (e.g. quay.io/org/image:1.0)",
        )


def cache_volume(s: SpyreModelSpec) -> Iterator[Problem]:
    size = s.cache.volume.size
    if quantity_value(size) <= 0:
        yield Problem(
            "spec.cache.volume.size",
            f"must be more than 0, got {shown(size)}: the claim's size, e.g. 100Gi",
        )


def image_pull_secrets(s: SpyreModelSpec) -> Iterator[Problem]:
    names = [ref.name for ref in s.image_pull_secrets]
    for i, name in enumerate(names):
        if name in names[:i]:
            yield Problem(f"spec.imagePullSecrets[{i}].name", f"{name} is listed twice: keep one")


def _cidr_problems(path: str, block: IpBlock) -> Iterator[Problem]:
    try:
        network = ipaddress.ip_network(block.cidr, strict=False)
    except ValueError:
        yield Problem(f"{path}.cidr", f"{block.cidr!r} is not a CIDR: write e.g. 10.0.0.0/8")
        return
    for i, text in enumerate(block.except_ or []):
        where = f"{path}.except[{i}]"
        try:
            inner = ipaddress.ip_network(text, strict=False)
        except ValueError:
            yield Problem(where, f"{text!r} is not a CIDR: write e.g. 10.1.0.0/16")
            continue
        inside = inner.network_address in network and inner.broadcast_address in network
        if not inside or inner.prefixlen <= network.prefixlen:
            yield Problem(where, f"{text} must be a range inside cidr {block.cidr}")


def network_policy(s: SpyreModelSpec) -> Iterator[Problem]:
    for i, peer in enumerate(s.service.allow_from or []):
        path = f"spec.service.allowFrom[{i}]"
        selectors = {
            "namespaceSelector": peer.namespace_selector,
            "podSelector": peer.pod_selector,
        }
        if peer.ip_block is not None:
            if any(v is not None for v in selectors.values()):
                yield Problem(
                    path, "ipBlock stands alone: put the selectors in a peer of their own"
                )
            yield from _cidr_problems(f"{path}.ipBlock", peer.ip_block)
        elif all(v is None for v in selectors.values()):
            yield Problem(
                path,
                "set namespaceSelector and/or podSelector, or ipBlock ({namespaceSelector: {}} "
                "admits every namespace)",
            )
        for name, selector in selectors.items():
            if selector is not None:
                yield from selector_problems(f"{path}.{name}", selector)


def api_key(s: SpyreModelSpec) -> Iterator[Problem]:
    for i, e in enumerate(s.env):
        if e.name != runtimes.VLLM_API_KEY:
            continue
        if s.service.api_key_secret is not None:
            yield Problem(
                f"spec.env[{i}].name",
                f"{e.name} comes from spec.service.apiKeySecret: remove it from env",
            )
        elif e.value is not None:
            yield Problem(
                f"spec.env[{i}].value",
                "an API key as a value is plain text in the pod spec: put it in a Secret and "
                "set spec.service.apiKeySecret",
            )
