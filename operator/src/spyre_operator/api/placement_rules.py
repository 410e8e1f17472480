"""Rules on where the pods may run (tolerations, node and pod affinity, topology spread):
Kubernetes' own rules on the fields a spec passes on, said before anything is created."""

from __future__ import annotations

import re
from collections.abc import Iterator

from spyre_operator.api.base import DNS_LABEL
from spyre_operator.api.k8s_types import (
    Affinity,
    LabelSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinity,
    PodAffinityTerm,
    Toleration,
)
from spyre_operator.api.labels import (
    key_problems,
    label_problems,
    value_problems,
)
from spyre_operator.api.names import GROUP
from spyre_operator.api.problem import Problem, shown
from spyre_operator.api.spec import SpyreModelSpec

# The label keys of the selector of a spread without a labelSelector (the serving pods of
# the SpyreModel, render/meta.server_selector).
SERVING_SELECTOR_KEYS = (f"{GROUP}/model", "app.kubernetes.io/component")
INTEGER = re.compile(r"[-+]?[0-9]{1,19}")  # an int64, as Gt and Lt compare
NAMESPACE = re.compile(DNS_LABEL)
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _toleration_problems(path: str, tolerations: list[Toleration] | None) -> Iterator[Problem]:
    """Kubernetes' ValidateTolerations."""
    for i, t in enumerate(tolerations or []):
        where = f"{path}[{i}]"
        if t.key:
            yield from key_problems(f"{where}.key", t.key, "a taint")
        elif t.operator != "Exists":
            yield Problem(
                f"{where}.operator",
                "must be Exists when key is empty (a toleration of every taint): set a key, "
                "or operator: Exists",
            )
        if t.toleration_seconds is not None and t.effect != "NoExecute":
            yield Problem(
                f"{where}.effect",
                "must be NoExecute when tolerationSeconds is set (only NoExecute taints evict): "
                "set effect: NoExecute, or remove tolerationSeconds",
            )
        if t.operator == "Exists" and t.value:
            yield Problem(
                f"{where}.value",
                "must be empty with operator Exists (every value matches): remove value, or "
                "use operator: Equal",
            )
        elif t.value:
            yield from value_problems(f"{where}.value", t.value)


def placement(s: SpyreModelSpec) -> Iterator[Problem]:
    """nodeSelector and tolerations of the pods (and of the compile and weights pods)."""
    compile_spec = s.cache.compile
    yield from label_problems("spec.nodeSelector", s.node_selector)
    yield from label_problems("spec.cache.compile.nodeSelector", compile_spec.node_selector or {})
    yield from _toleration_problems("spec.tolerations", s.tolerations)
    yield from _toleration_problems("spec.cache.compile.tolerations", compile_spec.tolerations)
    name = s.scheduler_name
    if name is not None and (not name.isprintable() or any(c.isspace() for c in name)):
        yield Problem(
            "spec.schedulerName",
            f"{shown(name)} cannot name a scheduler: no spaces or control characters (e.g. "
            "spyre-scheduler)",
        )


def _int64(text: str) -> bool:
    return INTEGER.fullmatch(text) is not None and -(2**63) <= int(text) < 2**63


def _requirement_problems(where: str, req: NodeSelectorRequirement) -> Iterator[Problem]:
    values, op = req.values or [], req.operator
    if op in ("In", "NotIn") and not values:
        yield Problem(f"{where}.values", f"required with operator {op}: the values to match")
    elif op in ("Exists", "DoesNotExist") and values:
        yield Problem(f"{where}.values", f"operator {op} takes none: remove them")
    elif op in ("Gt", "Lt") and (len(values) != 1 or not _int64(values[0])):
        yield Problem(
            f"{where}.values",
            f"operator {op} takes exactly one integer, e.g. ['4'], got {shown(values)}",
        )


def _node_term_problems(path: str, term: NodeSelectorTerm) -> Iterator[Problem]:
    for i, req in enumerate(term.match_expressions or []):
        where = f"{path}.matchExpressions[{i}]"
        yield from key_problems(f"{where}.key", req.key, "a node label")
        yield from _requirement_problems(where, req)
    for i, req in enumerate(term.match_fields or []):
        where = f"{path}.matchFields[{i}]"
        if req.key != "metadata.name":
            yield Problem(
                f"{where}.key",
                f"{shown(req.key)} is no node field Kubernetes selects on: use metadata.name",
            )
        if req.operator not in ("In", "NotIn") or len(req.values or []) != 1:
            yield Problem(where, "takes operator In or NotIn and exactly one value (a node name)")


def _label_keys_problems(path: str, keys: list[str] | None) -> Iterator[Problem]:
    for i, key in enumerate(keys or []):
        yield from key_problems(f"{path}[{i}]", key, "a label")


def _pod_term_problems(path: str, term: PodAffinityTerm) -> Iterator[Problem]:
    """Kubernetes' validatePodAffinityTerm."""
    yield from key_problems(f"{path}.topologyKey", term.topology_key, "a node label")
    if term.label_selector is not None:
        yield from selector_problems(f"{path}.labelSelector", term.label_selector)
    if term.namespace_selector is not None:
        yield from selector_problems(f"{path}.namespaceSelector", term.namespace_selector)
    for field, keys in (
        ("matchLabelKeys", term.match_label_keys),
        ("mismatchLabelKeys", term.mismatch_label_keys),
    ):
        if keys and term.label_selector is None:
            yield Problem(
                f"{path}.{field}",
                "must not be specified when labelSelector is not set (the keys narrow the "
                "pods it selects): add a labelSelector",
            )
        yield from _label_keys_problems(f"{path}.{field}", keys)
    mismatch = set(term.mismatch_label_keys or [])
    for i, key in enumerate(term.match_label_keys or []):
        if key in mismatch:
            yield Problem(
                f"{path}.matchLabelKeys[{i}]",
                f"{shown(key)} exists in both matchLabelKeys and mismatchLabelKeys: keep it in one",
            )
    for i, namespace in enumerate(term.namespaces or []):
        if not NAMESPACE.fullmatch(namespace):
            yield Problem(
                f"{path}.namespaces[{i}]",
                f"{shown(namespace)} is not a namespace name: lowercase letters, digits and "
                "'-', starting and ending with a letter or digit",
            )


def _pod_affinity_problems(path: str, pa: PodAffinity | None) -> Iterator[Problem]:
    if pa is None:
        return
    for i, term in enumerate(pa.required_during_scheduling_ignored_during_execution or []):
        yield from _pod_term_problems(f"{path}.{REQUIRED}[{i}]", term)
    for i, weighted in enumerate(pa.preferred_during_scheduling_ignored_during_execution or []):
        yield from _pod_term_problems(
            f"{path}.{PREFERRED}[{i}].podAffinityTerm", weighted.pod_affinity_term
        )


def affinity(s: SpyreModelSpec) -> Iterator[Problem]:
    """Kubernetes' ValidateAffinity, past the schema (types, required fields, weights)."""
    a: Affinity | None = s.affinity
    if a is None:
        return
    node = a.node_affinity
    if node is not None:
        path = "spec.affinity.nodeAffinity"
        required = node.required_during_scheduling_ignored_during_execution
        for i, term in enumerate(required.node_selector_terms if required else []):
            yield from _node_term_problems(f"{path}.{REQUIRED}.nodeSelectorTerms[{i}]", term)
        for i, pref in enumerate(node.preferred_during_scheduling_ignored_during_execution or []):
            yield from _node_term_problems(f"{path}.{PREFERRED}[{i}].preference", pref.preference)
    yield from _pod_affinity_problems("spec.affinity.podAffinity", a.pod_affinity)
    yield from _pod_affinity_problems("spec.affinity.podAntiAffinity", a.pod_anti_affinity)


def selector_problems(path: str, selector: LabelSelector) -> Iterator[Problem]:
    yield from label_problems(f"{path}.matchLabels", selector.match_labels or {})
    for i, req in enumerate(selector.match_expressions or []):
        where = f"{path}.matchExpressions[{i}]"
        yield from key_problems(f"{where}.key", req.key, "a label")
        listed = req.operator in ("In", "NotIn")
        if listed and not req.values:
            yield Problem(
                f"{where}.values", f"required with operator {req.operator}: the values to match"
            )
        elif not listed and req.values:
            yield Problem(f"{where}.values", f"operator {req.operator} takes none: remove them")
        for j, value in enumerate(req.values or []):
            yield from value_problems(f"{where}.values[{j}]", value)


def _selector_keys(selector: LabelSelector) -> set[str]:
    return set(selector.match_labels or {}) | {r.key for r in selector.match_expressions or []}


def topology_spread(s: SpyreModelSpec) -> Iterator[Problem]:
    """Kubernetes' validateTopologySpreadConstraints, on the constraint as rendered (an unset
    labelSelector becomes the SpyreModel's serving pods)."""
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(s.topology_spread_constraints):
        path = f"spec.topologySpreadConstraints[{i}]"
        yield from key_problems(f"{path}.topologyKey", c.topology_key, "a node label")
        if c.min_domains is not None and c.when_unsatisfiable != "DoNotSchedule":
            yield Problem(
                f"{path}.minDomains",
                "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not "
                f"{c.when_unsatisfiable}: set whenUnsatisfiable: DoNotSchedule, or remove "
                "minDomains",
            )
        selected = (
            _selector_keys(c.label_selector) if c.label_selector else set(SERVING_SELECTOR_KEYS)
        )
        yield from _label_keys_problems(f"{path}.matchLabelKeys", c.match_label_keys)
        for j, key in enumerate(c.match_label_keys or []):
            if key in selected:
                yield Problem(
                    f"{path}.matchLabelKeys[{j}]",
                    f"{shown(key)} exists in both matchLabelKeys and labelSelector"
                    + ("" if c.label_selector else " (unset: this SpyreModel's serving pods)")
                    + ": remove it from one",
                )
        pair = (c.topology_key, c.when_unsatisfiable)
        if pair in seen:
            yield Problem(
                path,
                f"a second constraint on {pair[0]} with {pair[1]}: Kubernetes allows one per "
                "topologyKey and whenUnsatisfiable, keep one",
            )
        seen.add(pair)
        if c.label_selector is not None:
            yield from selector_problems(f"{path}.labelSelector", c.label_selector)
