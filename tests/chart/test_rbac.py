"""The chart's RBAC is exactly enough: every API call the operator makes (as the integration
tier recorded them: tests/operator-calls.yaml) is allowed for its ServiceAccount, nothing
else is granted, and Secrets, pod writes, the deletes it does not make and unwatched
namespaces are refused.

The chart's ServiceAccount and roles are applied to the real control plane
(`helm template | kubectl apply`); each question is a SelfSubjectAccessReview asked *as*
that ServiceAccount (an impersonating client: the API server adds the ServiceAccount's
groups), i.e. the answer the authorizer gives the operator's own requests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import kopf
import pytest
import yaml
from chartlib import RELEASE, Installed, Kubectl, find, install_rbac, template
from kubernetes import client, config

import spyre_operator.handlers  # noqa: F401  (its decorators fill kopf's default registry)
from auditlib import Call, load_record
from spyre_operator.api.names import GROUP, PLURAL
from spyre_operator.kube import client as operator_kube

pytestmark = pytest.mark.chart


# Every request of the operator, as the integration tier's audit log recorded them while
# it ran the operator as the chart's ServiceAccount (tests/auditlib.py): in a watched
# namespace, and not in a namespace (kopf's own: the CRDs, and with a list of namespaces
# the namespaces themselves).
RECORDED = load_record()
OPERATOR_CALLS = tuple(sorted(RECORDED.namespaced))
KOPF_NAMESPACE_SCAN = (Call("list", "namespaces"), Call("watch", "namespaces"))
KOPF_CLUSTER_CALLS = tuple(sorted(RECORDED.cluster - set(KOPF_NAMESPACE_SCAN)))

# Refused in every namespace, watched or not.
REFUSED = (
    *(Call(v, "secrets") for v in ("get", "list", "watch", "create", "update", "patch", "delete")),
    *(Call(v, "pods") for v in ("create", "update", "patch", "delete", "deletecollection")),
    Call("get", "pods"),
    Call("get", "jobs", "batch"),
    Call("get", "deployments", "apps"),
    Call("get", "services"),
    Call("get", "persistentvolumeclaims"),
    Call("create", "pods", subresource="exec"),
    Call("patch", "pods", subresource="status"),
    Call("delete", "deployments", "apps"),
    Call("delete", "services"),
    Call("delete", "networkpolicies", "networking.k8s.io"),
    Call("delete", "persistentvolumeclaims"),
    Call("patch", "persistentvolumeclaims"),
    Call("update", "deployments", "apps"),
    Call("patch", "deployments", "apps", "scale"),
    Call("create", PLURAL, GROUP),
    Call("patch", PLURAL, GROUP),  # kopf writes nothing to a SpyreModel (handlers.py)
    Call("update", PLURAL, GROUP),
    Call("delete", PLURAL, GROUP),
    Call("update", PLURAL, GROUP, "status"),
    Call("get", "configmaps"),
    Call("create", "serviceaccounts", subresource="token"),
    Call("create", "roles", "rbac.authorization.k8s.io"),
    # RoleBindings: the endpoint pickers' only (test_the_operator_binds_the_picker_role_only)
    Call("patch", "events"),
    Call("create", "kopfpeerings", "kopf.dev"),
)
# Refused cluster-wide (namespace "" = across all namespaces, or cluster-scoped objects).
REFUSED_CLUSTER = (
    Call("list", "secrets"),
    Call("watch", "secrets"),
    Call("create", "pods"),
    Call("delete", "pods"),
    Call("get", "nodes"),
    Call("create", "customresourcedefinitions", "apiextensions.k8s.io"),
    Call("patch", "customresourcedefinitions", "apiextensions.k8s.io"),
    Call("delete", "namespaces"),
    Call("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
    Call("bind", "clusterroles", "rbac.authorization.k8s.io"),
    Call("escalate", "clusterroles", "rbac.authorization.k8s.io"),
    Call("create", "clusterkopfpeerings", "kopf.dev"),
)


def test_the_record_covers_every_resource_the_operator_touches() -> None:
    """The integration tier exercised every kind of the operator's client and each
    resource a kopf handler watches (their calls are in the record, so checked below)."""
    # in a namespace, and not (the nodes)
    resources = {c.resource for c in (*OPERATOR_CALLS, *RECORDED.cluster)}
    client_kinds = {plural for _, plural in operator_kube.KINDS.values()}
    assert client_kinds <= resources, client_kinds - resources
    registry = kopf.get_default_registry()
    watched = set()
    for sub in (registry._changing, registry._watching, registry._spawning, registry._indexing):
        # `@kopf.on.event("batch", "v1", "jobs")` keeps "jobs" as the selector's any_name.
        watched |= {(s.group or "", str(s.plural or s.any_name)) for s in sub.get_all_selectors()}
    for group, plural in watched:
        for verb in ("list", "watch"):
            assert Call(verb, plural, group) in {
                Call(c.verb, c.resource, c.group) for c in OPERATOR_CALLS
            }, f"kopf watches {plural}.{group}: no integration test saw it"


class Ask(Protocol):
    def __call__(self, call: Call, namespace: str, name: str | None = None) -> bool: ...


def asker(kubeconfig: str, user: str) -> Ask:
    """`ask(call, namespace)`: would the API server let `user` make this call?"""
    api = config.new_client_from_config(config_file=kubeconfig)
    api.set_default_header("Impersonate-User", user)
    authz = client.AuthorizationV1Api(api)

    def ask(call: Call, namespace: str, name: str | None = None) -> bool:
        attributes = client.V1ResourceAttributes(
            namespace=namespace or None,
            verb=call.verb,
            group=call.group,
            resource=call.resource,
            subresource=call.subresource or None,
            name=name,
        )
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
        )
        status = authz.create_self_subject_access_review(review).status
        assert status is not None
        return bool(status.allowed)

    return ask


def verdicts(ask: Ask, calls: tuple[Call, ...], namespace: str) -> dict[str, bool]:
    return {str(call): ask(call, namespace) for call in calls}


@pytest.fixture
def cluster_mode(kubectl: Kubectl, namespace: str) -> Iterator[Installed]:
    yield from install_rbac(kubectl, namespace, {"rbac.mode": "cluster"})


@pytest.fixture
def namespaced_mode(
    kubectl: Kubectl, namespace: str, make_namespace: Callable[[], str]
) -> Iterator[Installed]:
    values = {"rbac.mode": "namespaced", "watchNamespaces": [make_namespace(), make_namespace()]}
    yield from install_rbac(kubectl, namespace, values)


def test_cluster_mode_allows_every_operator_call_in_any_namespace(
    cluster_mode: Installed, kubeconfig: Any, make_namespace: Callable[[], str]
) -> None:
    ask = asker(str(kubeconfig), cluster_mode.user)
    for namespace in (make_namespace(), cluster_mode.namespace):
        got = verdicts(ask, OPERATOR_CALLS, namespace)
        assert all(got.values()), {c: ok for c, ok in got.items() if not ok}
    # kopf with --all-namespaces watches across namespaces: the same calls with no namespace.
    got = verdicts(ask, OPERATOR_CALLS + KOPF_CLUSTER_CALLS, "")
    assert all(got.values()), {c: ok for c, ok in got.items() if not ok}


def test_cluster_mode_refuses_secrets_pod_writes_deletes(
    cluster_mode: Installed, kubeconfig: Any, make_namespace: Callable[[], str]
) -> None:
    ask = asker(str(kubeconfig), cluster_mode.user)
    got = verdicts(ask, REFUSED, make_namespace())
    assert not any(got.values()), {c: ok for c, ok in got.items() if ok}
    got = verdicts(ask, REFUSED_CLUSTER + KOPF_NAMESPACE_SCAN, "")
    assert not any(got.values()), {c: ok for c, ok in got.items() if ok}


def test_namespaced_mode_allows_the_operator_calls_only_in_watched_namespaces(
    namespaced_mode: Installed, kubeconfig: Any, make_namespace: Callable[[], str]
) -> None:
    ask = asker(str(kubeconfig), namespaced_mode.user)
    for namespace in namespaced_mode.watched:
        got = verdicts(ask, OPERATOR_CALLS, namespace)
        assert all(got.values()), (namespace, {c: ok for c, ok in got.items() if not ok})
    got = verdicts(ask, KOPF_CLUSTER_CALLS + KOPF_NAMESPACE_SCAN, "")
    assert all(got.values()), {c: ok for c, ok in got.items() if not ok}
    # Neither an unwatched namespace, nor its own, nor across all namespaces.
    for namespace in (make_namespace(), namespaced_mode.namespace, ""):
        got = verdicts(ask, OPERATOR_CALLS, namespace)
        assert not any(got.values()), (namespace, {c: ok for c, ok in got.items() if ok})


def test_namespaced_mode_refuses_secrets_pod_writes_deletes(
    namespaced_mode: Installed, kubeconfig: Any
) -> None:
    ask = asker(str(kubeconfig), namespaced_mode.user)
    for namespace in namespaced_mode.watched:
        got = verdicts(ask, REFUSED, namespace)
        assert not any(got.values()), (namespace, {c: ok for c, ok in got.items() if ok})
    got = verdicts(ask, REFUSED_CLUSTER, "")
    assert not any(got.values()), {c: ok for c, ok in got.items() if ok}


def in_mode(
    mode: str, kubectl: Kubectl, namespace: str, make_namespace: Any
) -> Iterator[Installed]:
    """The chart's RBAC installed in `mode` (namespaced: watching one new namespace)."""
    values: dict[str, Any] = {"rbac.mode": mode}
    if mode == "namespaced":
        values["watchNamespaces"] = [make_namespace()]
    yield from install_rbac(kubectl, namespace, values)


# The webhook's own certificate (webhook/keeper.py): one Secret in the operator's namespace
# (it reads its CA and certificate, stores a renewed one) and one
# ValidatingWebhookConfiguration (its caBundle), each by name. test_operator_with_chart_rbac
# checks these are the calls the webhook made.
WEBHOOK_CALLS = (
    Call("get", "secrets"),
    Call("patch", "secrets"),
    Call("get", "validatingwebhookconfigurations", "admissionregistration.k8s.io"),
    Call("patch", "validatingwebhookconfigurations", "admissionregistration.k8s.io"),
)


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
def test_the_webhook_may_read_and_patch_its_own_secret_and_configuration_only(
    mode: str, kubectl: Kubectl, namespace: str, kubeconfig: Any, make_namespace: Any
) -> None:
    for installed in in_mode(mode, kubectl, namespace, make_namespace):
        ask = asker(str(kubeconfig), installed.user)
        (configuration,) = find(installed.docs, "ValidatingWebhookConfiguration")
        name = configuration["metadata"]["name"]
        (secret,) = find(installed.docs, "Secret")
        secret_name = secret["metadata"]["name"]
        for call in WEBHOOK_CALLS:
            scope = namespace if call.resource == "secrets" else ""
            own = secret_name if call.resource == "secrets" else name
            assert ask(call, scope, own), call
            assert not ask(call, scope, "another"), call
        # no Secret elsewhere, none created, listed or deleted; no other configuration
        elsewhere = installed.watched[0] if installed.watched else make_namespace()
        assert not ask(Call("get", "secrets"), elsewhere, secret_name)
        for verb in ("create", "list", "watch", "delete", "update"):
            assert not ask(Call(verb, "secrets"), namespace, secret_name), verb
        hooks = Call("create", "validatingwebhookconfigurations", "admissionregistration.k8s.io")
        assert not ask(hooks, "")


# The endpoint pickers' RoleBindings (spec.routing): the operator may bind the chart's
# picker ClusterRole, by name, and no other (binding is not a request: not in the record).
PICKER_BIND = Call("bind", "clusterroles", "rbac.authorization.k8s.io")


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
def test_the_operator_binds_the_picker_role_only(
    mode: str, kubectl: Kubectl, namespace: str, kubeconfig: Any, make_namespace: Any
) -> None:
    for installed in in_mode(mode, kubectl, namespace, make_namespace):
        ask = asker(str(kubeconfig), installed.user)
        (picker,) = (
            d["metadata"]["name"]
            for d in installed.docs
            if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-endpoint-picker")
        )
        assert f"--picker-cluster-role={picker}" in installed.operator_args
        watched = installed.watched[0] if installed.watched else make_namespace()
        assert ask(PICKER_BIND, watched, picker)
        for other in ("cluster-admin", "admin", "edit"):
            assert not ask(PICKER_BIND, watched, other), other
        assert not ask(Call("create", "roles", "rbac.authorization.k8s.io"), watched)


def test_rendered_rules_grant_exactly_the_listed_calls() -> None:
    """No verb in the chart that the operator does not use (the API server tests above
    show the listed calls pass; this shows nothing else is in the roles)."""
    result = template("ops", {"rbac.mode": "namespaced", "watchNamespaces": ["llm"]})
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (role,) = find(docs, "Role", f"{RELEASE}-spyre-operator")
    (framework,) = find(docs, "ClusterRole", f"{RELEASE}-spyre-operator-framework")

    def granted(rules: list[dict[str, Any]]) -> set[Call]:
        out = set()
        for rule in rules:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    out |= {Call(verb, name, group, sub) for verb in rule["verbs"]}
        return out

    def plain(calls: tuple[Call, ...]) -> set[Call]:
        return {Call(c.verb, c.resource, c.group, c.subresource) for c in calls}

    assert granted(role["rules"]) == plain((*OPERATOR_CALLS, PICKER_BIND))
    assert granted(framework["rules"]) == plain(KOPF_CLUSTER_CALLS + KOPF_NAMESPACE_SCAN)
    (secret_role,) = find(docs, "Role", f"{RELEASE}-spyre-operator-webhook")
    (hook_role,) = find(docs, "ClusterRole", f"{RELEASE}-spyre-operator-webhook")
    assert granted(secret_role["rules"] + hook_role["rules"]) == plain(WEBHOOK_CALLS)
    result = template("ops", {"rbac.mode": "cluster"})
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (cluster_role,) = find(docs, "ClusterRole", f"{RELEASE}-spyre-operator")
    assert granted(cluster_role["rules"]) == plain(
        OPERATOR_CALLS + KOPF_CLUSTER_CALLS + (PICKER_BIND,)
    )
    # No progress reads: the logs are still read once per serving pod (its start-up).
    result = template("ops", {"rbac.mode": "cluster", "operator.progressSeconds": 0})
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (cluster_role,) = find(docs, "ClusterRole", f"{RELEASE}-spyre-operator")
    assert granted(cluster_role["rules"]) == plain(
        OPERATOR_CALLS + KOPF_CLUSTER_CALLS + (PICKER_BIND,)
    )
