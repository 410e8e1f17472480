"""The platform's pod fields (imagePullSecrets, serviceAccountName, podAnnotations,
podLabels, priorityClassName, topologySpreadConstraints): checked as Kubernetes checks
them, rendered into the pods where they apply, and outside the cache key."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import example, merge, pinned, with_spec

from spyre_operator.api.validation import parse, validate
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import desired

pytestmark = pytest.mark.unit

ZONE_SPREAD = {
    "maxSkew": 1,
    "topologyKey": "topology.kubernetes.io/zone",
    "whenUnsatisfiable": "ScheduleAnyway",
}
PLATFORM: dict[str, Any] = {
    "imagePullSecrets": [{"name": "icr-pull"}, {"name": "quay.pull-2"}],
    "serviceAccountName": "spyre-models",
    "podAnnotations": {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "vault.hashicorp.com/agent-inject-template-cfg": '{{ with secret "kv/x" }}\n{{ end }}',
        "note": "",
    },
    "podLabels": {"team": "ai-platform", "example.com/cost-center": "cc-42", "empty": ""},
    "priorityClassName": "inference-high",
    "topologySpreadConstraints": [
        ZONE_SPREAD,
        {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {
                "matchLabels": {"team": "ai-platform"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}],
            },
        },
    ],
}
GRANITE = example("granite-3.3-8b-instruct")


def test_the_fields_are_valid_as_kubernetes_would_take_them() -> None:
    assert validate(with_spec(PLATFORM)) == []


def test_they_never_change_the_cache_key() -> None:
    """They place and label the pods; the compiled graphs are the same."""
    spec = parse(pinned(GRANITE)).spec
    other = parse(pinned(merge(GRANITE, {"spec": PLATFORM}))).spec
    assert cache_key(other) == cache_key(spec)


def _pods(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod templates of the weights Job, the compile Job and the Deployment, by role."""
    want = desired(parse(pinned(doc), "ai"))
    objects = {"weights": want.weights, "precompile": want.job, "serve": want.deployment}
    return {role: obj["spec"]["template"] for role, obj in objects.items() if obj is not None}


def test_every_pod_gets_the_identity_pull_secrets_priority_labels_and_annotations() -> None:
    plain = _pods(GRANITE)
    pods = _pods(merge(GRANITE, {"spec": PLATFORM}))
    assert set(pods) == {"weights", "precompile", "serve"}
    for role, pod in pods.items():
        spec, metadata = pod["spec"], pod["metadata"]
        assert spec["imagePullSecrets"] == PLATFORM["imagePullSecrets"], role
        assert spec["serviceAccountName"] == "spyre-models", role
        assert spec["priorityClassName"] == "inference-high", role
        # an identity, not API access: the token stays out of every pod
        assert spec["automountServiceAccountToken"] is False, role
        # the operator's labels and annotations are all there, unchanged
        assert metadata["labels"] == PLATFORM["podLabels"] | plain[role]["metadata"]["labels"]
        own = plain[role]["metadata"].get("annotations", {})
        assert metadata["annotations"] == PLATFORM["podAnnotations"] | own, role
        # and nothing else of the pod changed
        assert plain[role]["spec"]["serviceAccountName"] == "default"
        rest = {k: v for k, v in spec.items() if k not in PLATFORM}
        assert rest == {k: v for k, v in plain[role]["spec"].items() if k not in PLATFORM}, role


def test_only_the_serving_pods_spread_by_default_over_their_own_replicas() -> None:
    pods = _pods(merge(GRANITE, {"spec": PLATFORM}))
    assert all(
        "topologySpreadConstraints" not in pods[r]["spec"] for r in ("weights", "precompile")
    )
    zone, host = pods["serve"]["spec"]["topologySpreadConstraints"]
    selector = meta.server_selector("granite-8b-instruct")
    assert zone == ZONE_SPREAD | {"labelSelector": {"matchLabels": selector}}
    assert host == PLATFORM["topologySpreadConstraints"][1]  # its own selector stands


def test_the_operators_labels_are_reserved() -> None:
    """Every label the operator puts on a pod template is refused in podLabels."""
    for pod in _pods(GRANITE).values():
        for key in pod["metadata"]["labels"]:
            problems = validate(with_spec({"podLabels": {key: "mine"}}))
            assert [p.message for p in problems] == [
                f"{key} is set by the operator or by Kubernetes (it selects or identifies "
                "the pods): use a key of your own"
            ]


LONG = "a" * 64
BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "pull secret with an upper-case name": (
        {"imagePullSecrets": [{"name": "Regcred"}]},
        "spec.imagePullSecrets[0].name",
        "a Kubernetes object name: lowercase letters, digits, '-' and '.'",
    ),
    "pull secret listed twice": (
        {"imagePullSecrets": [{"name": "regcred"}, {"name": "regcred"}]},
        "spec.imagePullSecrets[1].name",
        "regcred is listed twice: keep one",
    ),
    "pull secret without a name": (
        {"imagePullSecrets": [{}]},
        "spec.imagePullSecrets[0].name",
        "required field is missing",
    ),
    "too many pull secrets": (
        {"imagePullSecrets": [{"name": f"s{i}"} for i in range(17)]},
        "spec.imagePullSecrets",
        "at most 16 items",
    ),
    "service account with a path in it": (
        {"serviceAccountName": "../kube-system/admin"},
        "spec.serviceAccountName",
        "a Kubernetes object name",
    ),
    "service account with a trailing newline": (
        {"serviceAccountName": "sa\n"},
        "spec.serviceAccountName",
        "a Kubernetes object name",
    ),
    "priority class too long": (
        {"priorityClassName": "p" * 254},
        "spec.priorityClassName",
        "at most 253 characters",
    ),
    "label key with a space": (
        {"podLabels": {"cost center": "x"}},
        'spec.podLabels["cost center"]',
        "'cost center' is not a label key: an optional DNS subdomain prefix and '/'",
    ),
    "label key with two slashes": (
        {"podLabels": {"a.io/b/c": "x"}},
        'spec.podLabels["a.io/b/c"]',
        "is not a label key",
    ),
    "label key prefix not a subdomain": (
        {"podLabels": {"Example.com/team": "x"}},
        'spec.podLabels["Example.com/team"]',
        "is not a label key",
    ),
    "label key name over 63 characters": (
        {"podLabels": {LONG: "x"}},
        f"spec.podLabels.{LONG}",
        "is not a label key",
    ),
    "label value over 63 characters": (
        {"podLabels": {"team": LONG}},
        "spec.podLabels.team",
        "must have at most 63 characters, got 64",
    ),
    "label value with a newline": (
        {"podLabels": {"team": "ai\n"}},
        "spec.podLabels.team",
        "is not a label value",
    ),
    "the selector label": (
        {"podLabels": {meta.MODEL_LABEL: "other"}},
        f'spec.podLabels["{meta.MODEL_LABEL}"]',
        "is set by the operator or by Kubernetes (it selects or identifies the pods)",
    ),
    "the Job controller's label": (
        {"podLabels": {"batch.kubernetes.io/job-name": "x"}},
        'spec.podLabels["batch.kubernetes.io/job-name"]',
        "is set by the operator or by Kubernetes",
    ),
    "too many labels": (
        {"podLabels": {f"l{i}": "x" for i in range(33)}},
        "spec.podLabels",
        "at most 32 items",
    ),
    "annotation key that is not a qualified name": (
        {"podAnnotations": {"-inject": "true"}},
        'spec.podAnnotations["-inject"]',
        "'-inject' is not an annotation key",
    ),
    "the operator's annotation": (
        {"podAnnotations": {meta.CACHE_KEY_ANNOTATION: "0" * 64}},
        f'spec.podAnnotations["{meta.CACHE_KEY_ANNOTATION}"]',
        "keys under serving.spyre.dev/ are the operator's",
    ),
    "annotations over Kubernetes' total size": (
        {"podAnnotations": {"a": "x" * 200_000, "b": "y" * 70_000}},
        "spec.podAnnotations",
        "keys and values come to 270002 bytes; Kubernetes allows 262144",
    ),
    "annotation value that is not a string": (
        {"podAnnotations": {"sidecar.istio.io/inject": True}},
        'spec.podAnnotations["sidecar.istio.io/inject"]',
        'must be a string, got true: quote it in YAML ("true")',
    ),
    "spread without a skew": (
        {"topologySpreadConstraints": [ZONE_SPREAD | {"maxSkew": 0}]},
        "spec.topologySpreadConstraints[0].maxSkew",
        "must be at least 1, got 0",
    ),
    "spread with an unknown policy": (
        {"topologySpreadConstraints": [ZONE_SPREAD | {"whenUnsatisfiable": "Sometimes"}]},
        "spec.topologySpreadConstraints[0].whenUnsatisfiable",
        "must be one of 'DoNotSchedule' or 'ScheduleAnyway', got 'Sometimes'",
    ),
    "spread on a key that is not a label key": (
        {"topologySpreadConstraints": [ZONE_SPREAD | {"topologyKey": "zone/"}]},
        "spec.topologySpreadConstraints[0].topologyKey",
        "'zone/' is not a node label key",
    ),
    "two spreads on one key and policy": (
        {"topologySpreadConstraints": [ZONE_SPREAD, ZONE_SPREAD | {"maxSkew": 3}]},
        "spec.topologySpreadConstraints[1]",
        "Kubernetes allows one per topologyKey and whenUnsatisfiable",
    ),
    "selector In without values": (
        {"topologySpreadConstraints": [ZONE_SPREAD | {"labelSelector": {
            "matchExpressions": [{"key": "tier", "operator": "In"}]}}]},
        "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values",
        "required with operator In: the values to match",
    ),
    "selector Exists with values": (
        {"topologySpreadConstraints": [ZONE_SPREAD | {"labelSelector": {
            "matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]}}]},
        "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values",
        "operator Exists takes none: remove them",
    ),
    "selector value that is not a label value": (
        {"topologySpreadConstraints": [ZONE_SPREAD | {"labelSelector": {
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a b"]}]}}]},
        "spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].values[0]",
        "'a b' is not a label value",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("patch", "path", "fragment"), BAD.values(), ids=BAD.keys())
def test_bad_values_name_the_field_the_rule_and_the_fix(
    patch: dict[str, Any], path: str, fragment: str
) -> None:
    problems = validate(with_spec(patch))
    assert [p.path for p in problems] == [path], problems
    assert fragment in problems[0].message, problems[0].message
