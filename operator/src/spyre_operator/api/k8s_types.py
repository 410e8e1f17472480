"""Copies of the Kubernetes types a spec passes on to the pods and the Service, with the
fields of the newest release the kubernetes client knows (tests/unit/test_api_kubernetes_types.py
compares them) and bounds on every list and string, so a CRD schema can hold them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from spyre_operator.api.base import (
    ApiModel,
    LabelValue,
    ObjectName,
    Quantity,
)

# Label and annotation keys: a qualified name, at most a 253-character prefix, '/' and 63.
LabelKey = Annotated[str, Field(min_length=1, max_length=317)]

# The lists of the selectors and affinity terms are bounded tighter than a size bound needs:
# the API server's cost of a create grows with the number of fields its schema checks
# (5-80 microseconds each on the 2-core dev machine, Kubernetes 1.20), and these lists
# multiply through their nesting. With these bounds a spec has at most about 6,000 fields
# (28,000 with 8 terms and requirements, 16 values and matchLabels; 270,000 with 16 terms
# and requirements and 64 values); tests/unit/test_api_crd.py counts them in the CRD, and
# docs/api.md ("The schema protects the API server") has the figures and who they refuse.
TERMS = 4  # terms per list (node selector terms, pod affinity terms), namespaces per term
REQUIREMENTS = 4  # requirements of a node selector term or a label selector
VALUES = 8  # values of a requirement
SELECTOR_LABELS = 8  # matchLabels of a label selector
# Pod label keys whose values the scheduler reads from the incoming pod (matchLabelKeys).
LabelKeys = Annotated[list[LabelKey], Field(max_length=4)]


EnvName = Annotated[str, Field(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", max_length=256)]


# Free text the operator passes on (env values, extra arguments): bounded, as a request is.
Text = Annotated[str, Field(max_length=32768)]


# A key of a Secret's data (Kubernetes' IsConfigMapKey).
SecretKey = Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)]


class Toleration(ApiModel):
    """core/v1 Toleration."""

    key: Annotated[str, Field(max_length=317)] | None = None
    """Taint key to tolerate; empty with operator Exists tolerates every taint."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists (any value) or Equal (the value below); Kubernetes defaults to Equal."""
    value: LabelValue | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches every effect."""
    # (not int64's 2**63 - 1: the API server reads a schema's maximum as a float64, which
    # rounds that up to 2**63, and then refused every value as above -2**63)
    toleration_seconds: Annotated[int, Field(ge=0, le=2**53)] | None = None
    """With NoExecute: how long the pod stays bound after the taint appears."""


Tolerations = Annotated[list[Toleration], Field(max_length=16)]


class EnvKeyRef(ApiModel):
    name: ObjectName
    """Name of the Secret or ConfigMap."""
    key: SecretKey
    """Key in it."""
    optional: bool | None = None
    """Start the pod even if the object or key is missing."""


class EnvFieldRef(ApiModel):
    """A field of the pod (core/v1 ObjectFieldSelector)."""

    field_path: Annotated[str, Field(min_length=1, max_length=256)]
    """Path of the field, e.g. metadata.name or status.podIP."""
    api_version: Annotated[str, Field(max_length=64)] | None = None
    """API version the path is written in; Kubernetes defaults to v1."""


class EnvVarSource(ApiModel):
    """Where the value comes from (instead of value): exactly one of secretKeyRef,
    configMapKeyRef, fieldRef."""

    secret_key_ref: EnvKeyRef | None = None
    """A key of a Secret in the SpyreModel's namespace."""
    config_map_key_ref: EnvKeyRef | None = None
    """A key of a ConfigMap in the SpyreModel's namespace."""
    field_ref: EnvFieldRef | None = None


class EnvVar(ApiModel):
    """core/v1 EnvVar: a value or a reference."""

    name: EnvName
    """Variable name; the names the operator renders are refused (docs/api.md)."""
    value: Text | None = None
    """Literal value."""
    value_from: EnvVarSource | None = None


class LocalObjectReference(ApiModel):
    name: ObjectName
    """Name of a docker-registry Secret (kubernetes.io/dockerconfigjson) in the SpyreModel's
    namespace."""


class LabelSelectorRequirement(ApiModel):
    key: LabelKey
    """Label key."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the key's value is matched; In and NotIn need values, the others take none."""
    values: Annotated[list[LabelValue], Field(max_length=VALUES)] | None = None
    """Label values for In and NotIn."""


class LabelSelector(ApiModel):
    """A label query (metav1.LabelSelector): every requirement must hold; {} matches all."""

    match_labels: Annotated[dict[str, LabelValue], Field(max_length=SELECTOR_LABELS)] | None = None
    """Labels a match must carry (all of them)."""
    match_expressions: (
        Annotated[list[LabelSelectorRequirement], Field(max_length=REQUIREMENTS)] | None
    ) = None
    """Requirements a match must meet (all of them)."""


class IpBlock(ApiModel):
    """A range of IP addresses (networking/v1 IPBlock), e.g. clients outside the cluster."""

    cidr: Annotated[str, Field(min_length=1, max_length=43)]
    """Addresses admitted, e.g. 10.0.0.0/8, 0.0.0.0/0 or ::/0."""
    except_: Annotated[list[Annotated[str, Field(max_length=43)]], Field(max_length=16)] | None = (
        Field(default=None, alias="except")
    )
    """Ranges inside cidr that are not admitted."""


class NetworkPeer(ApiModel):
    """Who may connect (networking/v1 NetworkPolicyPeer): namespaceSelector and/or
    podSelector, or an ipBlock alone."""

    namespace_selector: LabelSelector | None = None
    """Namespaces whose pods are admitted; {} is every namespace. With podSelector: only
    those pods of those namespaces."""
    pod_selector: LabelSelector | None = None
    """Pods admitted; alone, pods of the SpyreModel's namespace only."""
    ip_block: IpBlock | None = None
    """Addresses admitted (clients that are not pods: a LoadBalancer's or NodePort's)."""


# The Kubernetes types below are copies of core/v1's with the fields of the newest release
# the kubernetes client knows (tests/unit/test_api_kubernetes_types.py compares them), and
# bounds on every list.


class NodeSelectorRequirement(ApiModel):
    key: LabelKey
    """Node label key (matchExpressions), or metadata.name (matchFields)."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """In and NotIn need values, Exists and DoesNotExist take none, Gt and Lt one integer."""
    values: (
        Annotated[list[Annotated[str, Field(max_length=253)]], Field(max_length=VALUES)] | None
    ) = None
    """Values to compare with: label values, or node names for metadata.name."""


class NodeSelectorTerm(ApiModel):
    """Requirements a node must meet (all of them)."""

    match_expressions: (
        Annotated[list[NodeSelectorRequirement], Field(max_length=REQUIREMENTS)] | None
    ) = None
    """Requirements on the node's labels."""
    match_fields: (
        Annotated[list[NodeSelectorRequirement], Field(max_length=REQUIREMENTS)] | None
    ) = None
    """Requirements on the node's fields (metadata.name, operator In or NotIn, one value)."""


class NodeSelector(ApiModel):
    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1, max_length=TERMS)]
    """A node must meet one of the terms."""


class PreferredSchedulingTerm(ApiModel):
    weight: Annotated[int, Field(ge=1, le=100)]
    """Weight of the preference, 1-100."""
    preference: NodeSelectorTerm
    """The node preferred."""


class NodeAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    """Nodes the pods must run on."""
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[PreferredSchedulingTerm], Field(max_length=TERMS)] | None
    ) = None
    """Nodes the pods prefer."""


Namespaces = Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=TERMS)]


class PodAffinityTerm(ApiModel):
    label_selector: LabelSelector | None = None
    """Pods this term is about."""
    namespaces: Namespaces | None = None
    """Namespaces of those pods; unset (and no namespaceSelector): the SpyreModel's
    namespace."""
    namespace_selector: LabelSelector | None = None
    """Namespaces of those pods, by their labels (added to namespaces); {} is every
    namespace (Kubernetes 1.22+)."""
    topology_key: LabelKey
    """Node label whose value is the domain, e.g. kubernetes.io/hostname."""
    match_label_keys: LabelKeys | None = None
    """Labels of the incoming pod whose values the term's pods must have too (Kubernetes
    1.31+, needs labelSelector), e.g. pod-template-hash: this rollout's pods only."""
    mismatch_label_keys: LabelKeys | None = None
    """Labels of the incoming pod whose values the term's pods must not have (Kubernetes
    1.31+, needs labelSelector)."""


class WeightedPodAffinityTerm(ApiModel):
    weight: Annotated[int, Field(ge=1, le=100)]
    """Weight of the preference, 1-100."""
    pod_affinity_term: PodAffinityTerm
    """The term preferred."""


class PodAffinity(ApiModel):
    """Pods to run near (podAffinity) or away from (podAntiAffinity)."""

    required_during_scheduling_ignored_during_execution: (
        Annotated[list[PodAffinityTerm], Field(max_length=TERMS)] | None
    ) = None
    """Terms the pods must meet."""
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[WeightedPodAffinityTerm], Field(max_length=TERMS)] | None
    ) = None
    """Terms the pods prefer to meet."""


class Affinity(ApiModel):
    """core/v1 Affinity."""

    node_affinity: NodeAffinity | None = None
    """Nodes the pods run on, by node labels."""
    pod_affinity: PodAffinity | None = None
    """Pods to run near (in the same topology domain)."""
    pod_anti_affinity: PodAffinity | None = None
    """Pods to run away from (not in the same topology domain)."""


NodeInclusionPolicy = Literal["Honor", "Ignore"]


class TopologySpreadConstraint(ApiModel):
    """core/v1 TopologySpreadConstraint."""

    max_skew: Annotated[int, Field(ge=1, le=1000)]
    """Most the number of matching pods may differ between two topology domains."""
    topology_key: LabelKey
    """Node label whose values are the domains, e.g. topology.kubernetes.io/zone."""
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    """DoNotSchedule keeps a pod pending; ScheduleAnyway only prefers the spread."""
    label_selector: LabelSelector | None = None
    """Pods counted for the spread; unset: this SpyreModel's serving pods."""
    min_domains: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    """Fewest eligible domains: with fewer, the global minimum counts as 0 (Kubernetes
    1.27+; only with whenUnsatisfiable DoNotSchedule)."""
    match_label_keys: LabelKeys | None = None
    """Labels of the incoming pod whose values the counted pods must have too (Kubernetes
    1.27+), e.g. pod-template-hash: each rollout spreads on its own."""
    node_affinity_policy: NodeInclusionPolicy | None = None
    """Honor (count only nodes the pod's nodeSelector and affinity allow) or Ignore (all
    nodes); unset is Honor (Kubernetes 1.26+)."""
    node_taints_policy: NodeInclusionPolicy | None = None
    """Honor (count only nodes whose taints the pod tolerates) or Ignore (all nodes); unset
    is Ignore (Kubernetes 1.26+)."""


ResourceMap = Annotated[dict[str, Quantity], Field(max_length=16)]


class Resources(ApiModel):
    limits: ResourceMap = Field(default_factory=dict)
    """Most a container may use, e.g. {cpu: 8, memory: 64Gi}."""
    requests: ResourceMap = Field(default_factory=dict)
    """What the scheduler reserves, e.g. {cpu: 4, memory: 48Gi}."""
