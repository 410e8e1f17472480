"""The chart renders what docs/install.md documents, and the real API server accepts it.

Every documented values combination goes through `helm lint`, `helm template` and
`kubectl apply --dry-run=server` on the real control plane (CRD installed first, watched
namespaces created); wrong values fail at `helm template` with the field's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from chartlib import CHART, RELEASE, Kubectl, find, helm, render, set_args, template

from spyre_operator import settings
from spyre_operator.api.runtimes import IMAGE_REPOSITORY
from spyre_operator.api.validation import parse
from spyre_operator.cli import build_parser
from spyre_operator.cli.run import from_flags
from spyre_operator.render.children import build_deployment
from spyre_operator.render.serving import build_service
from spyre_operator.render.yamlio import load_documents
from spyre_operator.settings import Settings

pytestmark = pytest.mark.chart

FULLNAME = f"{RELEASE}-spyre-operator"
WEBHOOK = f"{FULLNAME}-webhook"

# The documented combinations (docs/install.md), as functions of the watched namespaces.
Combination = Callable[[list[str]], dict[str, Any]]
COMBINATIONS: dict[str, Combination] = {
    "defaults": lambda _: {},
    "cluster-wide": lambda _: {"rbac.mode": "cluster", "serviceAccount.name": "spyre-op"},
    "namespaced": lambda ns: {"rbac.mode": "namespaced", "watchNamespaces": ns},
    "monitoring-podmonitor": lambda _: {
        "monitoring.serving": {"enabled": True, "labels": {"release": "prometheus"}},
        "monitoring.operator": {"enabled": True, "labels": {"release": "prometheus"}},
        "monitoring.rules": {"enabled": True, "labels": {"release": "prometheus"}},
        "monitoring.dashboard": {"enabled": True, "annotations": {"grafana_folder": "Spyre"}},
    },
    "monitoring-servicemonitor-namespaced": lambda ns: {
        "rbac.mode": "namespaced",
        "watchNamespaces": ns,
        "monitoring.serving": {"enabled": True, "kind": "ServiceMonitor", "interval": "15s"},
    },
    "custom-images-resources": lambda _: {
        "image": {"repository": "registry.example.com/spyre/operator", "tag": "0.1.0-rc1"},
        "image.pullPolicy": "Always",
        "imagePullSecrets": [{"name": "registry-creds"}],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        "operator": {
            "logLevel": "debug",
            "resyncSeconds": 60,
            "workers": 4,
            "maxCompiles": 8,
            "maxCompilesPerNamespace": 2,
            "progressSeconds": 15,
            "cacheRetention": "36h",
        },
        "metrics.port": 9090,
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"example.com/team": "ml-platform"},
        "runtimeImage": {
            "repository": "mirror.example.com:5000/ai/spyre-runtime",
            "cards": False,
            "injector": f"mirror.example.com:5000/ai/operator@sha256:{'0' * 64}",
            "pullSecrets": [{"name": "mirror-pull"}, {"name": "mirror-pull-2"}],
        },
    },
    "webhook-fail-policy": lambda _: {"webhook": {"failurePolicy": "Fail", "timeoutSeconds": 10}},
    "webhook-cert-manager": lambda _: {"webhook.certificates.source": "cert-manager"},
    "webhook-openshift-service-ca": lambda _: {
        "webhook.certificates.source": "openshift-service-ca"
    },
    "webhook-cert-manager-issuer-namespaced": lambda ns: {
        "rbac.mode": "namespaced",
        "watchNamespaces": ns,
        "webhook.certificates": {
            "source": "cert-manager",
            "certManager": {"issuerRef": {"name": "company-ca", "kind": "ClusterIssuer"}},
        },
    },
    "webhook-off": lambda _: {"webhook.enabled": False},
    "network-policy-narrowed": lambda _: {
        "networkPolicy.metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "networkPolicy.webhookFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
    },
    "network-policy-off": lambda _: {"networkPolicy.enabled": False},
    "openshift-security-context": lambda _: {
        "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
        "operator.platform": "openshift",
    },
}


def test_helm_lint_passes_for_every_combination() -> None:
    for name, combination in COMBINATIONS.items():
        result = helm("lint", "--strict", str(CHART), *set_args(combination(["a", "b"])))
        assert result.returncode == 0, f"{name}: {result.stdout}\n{result.stderr}"


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_every_combination_passes_a_server_side_dry_run(
    name: str,
    namespace: str,
    make_namespace: Callable[[], str],
    kubectl: Kubectl,
    spyremodel_crd: str,
    monitoring_crds: None,
    cert_manager_crds: None,
) -> None:
    watched = [make_namespace(), make_namespace()]
    result = template(namespace, COMBINATIONS[name](watched))
    assert result.returncode == 0, result.stderr
    applied = kubectl("apply", "--dry-run=server", "-f", "-", input=result.stdout)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    lines = applied.stdout.splitlines()
    assert len(lines) == len(docs), applied.stdout
    assert all(line.endswith("(server dry run)") for line in lines), applied.stdout
    assert any(line.startswith(f"deployment.apps/{FULLNAME} ") for line in lines), lines


def test_operator_deployment_is_one_restricted_replica() -> None:
    docs = render("ops")
    (deploy,) = find(docs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    # `spyre-operator run` without --namespace watches every namespace; every other
    # setting is the operator's default.
    parsed = build_parser().parse_args(container["args"])
    assert parsed.liveness == "http://0.0.0.0:8080/healthz"
    assert from_flags(parsed, {}) == Settings(
        metrics_port=8081,
        webhook_port=9443,
        webhook_secret=f"ops/{WEBHOOK}-cert",
        webhook_hosts=(f"{WEBHOOK}.ops.svc",),
        webhook_configuration=WEBHOOK,
        picker_cluster_role=f"{FULLNAME}-endpoint-picker",
    )
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    assert container["image"] == "quay.io/spyre-serving/operator:0.1.0"
    assert pod["serviceAccountName"] == FULLNAME


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_the_operator_command_accepts_the_rendered_args(name: str) -> None:
    """The Deployment's args go through the real `spyre-operator run` parser."""
    values = COMBINATIONS[name](["llm-a", "llm-b"])
    (deploy,) = find(render("ops", values), "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["spyre-operator"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "run"
    watched = values.get("watchNamespaces", [])
    probe_port = container["livenessProbe"]["httpGet"]["port"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.liveness == f"http://0.0.0.0:{ports[probe_port]}/healthz"
    operator = values.get("operator", {}) | {  # given whole, or one by one (--set a.b=c)
        key.removeprefix("operator."): v for key, v in values.items() if key.startswith("operator.")
    }
    assert args.verbose is (operator.get("logLevel") == "debug")
    config = from_flags(args, {})  # a valid combination of every flag
    assert config.namespaces == tuple(watched)
    assert config.metrics_port == ports.get("metrics", 0)
    for name, field in settings.chart_fields().items():  # the chart's values, as given
        assert getattr(config, field) == operator.get(name, Settings.model_fields[field].default)
    assert config.webhook_port == (
        0 if values.get("webhook.enabled") is False else ports["webhook"]
    )
    runtime = values.get("runtimeImage", {})
    assert config.runtime_image_repository == runtime.get("repository", IMAGE_REPOSITORY)
    assert config.runtime_image_pull_secrets == tuple(
        s["name"] for s in runtime.get("pullSecrets", [])
    )
    assert config.runtime_image_cards is runtime.get("cards", True)
    assert config.runtime_injector_image == (runtime.get("injector") or None)


def test_namespaced_mode_watches_exactly_the_list() -> None:
    docs = render("ops", {"rbac.mode": "namespaced", "watchNamespaces": ["llm-a", "llm-b"]})
    (deploy,) = find(docs, "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=llm-a",
        "--namespace=llm-b",
    ]
    roles = find(docs, "Role", FULLNAME)
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["llm-a", "llm-b"]
    assert sorted(b["metadata"]["namespace"] for b in find(docs, "RoleBinding", FULLNAME)) == [
        "llm-a",
        "llm-b",
    ]
    (cluster_role,) = find(docs, "ClusterRole", f"{FULLNAME}-framework")
    for rule in cluster_role["rules"]:
        assert set(rule["verbs"]) <= {"list", "watch"}, rule
        assert set(rule["resources"]) <= {"customresourcedefinitions", "namespaces", "nodes"}, rule


@pytest.mark.parametrize("mode", ["cluster", "namespaced"])
def test_rbac_has_no_wildcards_no_secrets_and_no_pod_writes(mode: str) -> None:
    values: dict[str, Any] = {"rbac.mode": mode}
    if mode == "namespaced":
        values["watchNamespaces"] = ["llm"]
    docs = render("ops", values)
    roles = find(docs, "ClusterRole") + find(docs, "Role")
    assert roles
    for role in roles:
        webhook = role["metadata"]["name"] == WEBHOOK
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], (role["metadata"]["name"], rule)
            if webhook:  # its own certificate Secret and webhook configuration, by name
                assert rule["verbs"] == ["get", "patch"], rule
                assert rule["resourceNames"] in ([f"{WEBHOOK}-cert"], [WEBHOOK]), rule
                continue
            assert "secrets" not in rule["resources"], rule
            if rule["verbs"] == ["bind"]:  # the endpoint pickers' ClusterRole, by name
                assert rule["resourceNames"] == [f"{FULLNAME}-endpoint-picker"], rule
                continue
            assert not rule.get("resourceNames"), rule
            if "pods" in rule["resources"]:
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    (secret_role,) = find(docs, "Role", WEBHOOK)
    assert secret_role["metadata"]["namespace"] == "ops"


def test_rbac_create_false_renders_no_roles() -> None:
    values = {"rbac.create": False, "serviceAccount.create": False, "serviceAccount.name": "x"}
    docs = render("ops", values)
    kinds = {d["kind"] for d in docs}
    assert kinds == {
        "Deployment", "Service", "Secret", "ValidatingWebhookConfiguration", "NetworkPolicy"
    }  # fmt: skip
    (deploy,) = find(docs, "Deployment")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "x"


def _webhook(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (configuration,) = find(docs, "ValidatingWebhookConfiguration", WEBHOOK)
    (hook,) = configuration["webhooks"]
    hook_config: dict[str, Any] = hook
    return hook_config


def test_the_webhook_reaches_the_operator_through_its_service_for_both_kinds_only() -> None:
    docs = render("ops")
    hook = _webhook(docs)
    assert hook["clientConfig"] == {
        "service": {"name": WEBHOOK, "namespace": "ops", "path": "/spyremodels", "port": 443}
    }  # no caBundle: the operator keeps it, an upgrade leaves it alone
    (service,) = find(docs, "Service", WEBHOOK)
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    (deploy,) = find(docs, "Deployment")
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    assert hook["rules"] == [
        {
            "apiGroups": ["serving.spyre.dev"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["spyremodels", "spyrecaches"],  # not their /status nor /scale
            "scope": "Namespaced",
        }
    ]
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"]) == (
        "Ignore",
        5,
        "None",  # so `kubectl apply --dry-run=server` is checked too
    )
    assert "namespaceSelector" not in hook  # every namespace, as the operator watches
    (secret,) = find(docs, "Secret", f"{WEBHOOK}-cert")
    assert "data" not in secret  # the operator fills it; an upgrade keeps what it wrote
    assert find(docs, "Certificate") == []


def test_the_webhook_checks_the_watched_namespaces_or_the_given_selector() -> None:
    values: dict[str, Any] = {"rbac.mode": "namespaced", "watchNamespaces": ["llm-a", "llm-b"]}
    assert _webhook(render("ops", values))["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["llm-a", "llm-b"]}
        ]
    }
    selector = {"matchLabels": {"spyre": "on"}}
    values["webhook.namespaceSelector"] = selector
    assert _webhook(render("ops", values))["namespaceSelector"] == selector


def test_cert_manager_issues_the_certificate_mounted_into_the_operator() -> None:
    docs = render("ops", {"webhook.certificates.source": "cert-manager"})
    (configuration,) = find(docs, "ValidatingWebhookConfiguration", WEBHOOK)
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"ops/{WEBHOOK}"
    }
    (certificate,) = find(docs, "Certificate", WEBHOOK)
    assert f"{WEBHOOK}.ops.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"name": f"{WEBHOOK}-selfsigned", "kind": "Issuer"}
    find(docs, "Issuer", f"{WEBHOOK}-selfsigned")
    (deploy,) = find(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--webhook-cert-dir=/webhook-certs" in container["args"]
    assert not any(a.startswith("--webhook-secret") for a in container["args"])
    mount = {"name": "webhook-certs", "mountPath": "/webhook-certs", "readOnly": True}
    assert mount in container["volumeMounts"]
    secret = certificate["spec"]["secretName"]
    assert {"name": "webhook-certs", "secret": {"secretName": secret}} in pod["volumes"]
    # the operator touches no Secret and no webhook configuration then
    assert find(docs, "Secret") == [] and find(docs, "Role", WEBHOOK) == []
    issuer = {"name": "company-ca", "kind": "ClusterIssuer"}
    values = {"webhook.certificates": {"source": "cert-manager",
                                       "certManager": {"issuerRef": issuer}}}  # fmt: skip
    docs = render("ops", values)
    assert find(docs, "Issuer") == []
    assert find(docs, "Certificate", WEBHOOK)[0]["spec"]["issuerRef"] == issuer


def test_openshift_service_ca_issues_the_certificate_mounted_into_the_operator() -> None:
    docs = render("ops", {"webhook.certificates.source": "openshift-service-ca"})
    (service,) = find(docs, "Service", WEBHOOK)
    secret = service["metadata"]["annotations"][
        "service.beta.openshift.io/serving-cert-secret-name"
    ]
    assert secret == f"{WEBHOOK}-tls"
    (configuration,) = find(docs, "ValidatingWebhookConfiguration", WEBHOOK)
    assert configuration["metadata"]["annotations"] == {
        "service.beta.openshift.io/inject-cabundle": "true"
    }
    (deploy,) = find(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--webhook-cert-dir=/webhook-certs" in container["args"]
    assert not any(a.startswith("--webhook-secret") for a in container["args"])
    assert {"name": "webhook-certs", "secret": {"secretName": secret}} in pod["volumes"]
    # nothing of cert-manager's, and the operator touches no Secret or configuration
    assert find(docs, "Certificate") == [] and find(docs, "Issuer") == []
    assert find(docs, "Secret") == [] and find(docs, "Role", WEBHOOK) == []
    assert find(docs, "ClusterRole", WEBHOOK) == []


def test_webhook_off_renders_none_of_it() -> None:
    docs = render("ops", {"webhook.enabled": False})
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "Deployment", "NetworkPolicy"}  # fmt: skip
    (deploy,) = find(docs, "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--webhook") for a in container["args"])
    assert "readinessProbe" not in container


def test_the_webhook_port_must_differ_from_the_other_ports() -> None:
    result = template("ops", {"webhook.port": 8081})
    assert result.returncode != 0
    assert "webhook.port: must differ from metrics.port" in result.stderr


@pytest.mark.parametrize(
    ("kind", "endpoints"), [("PodMonitor", "podMetricsEndpoints"), ("ServiceMonitor", "endpoints")]
)
def test_serving_monitor_selects_the_serving_pods(kind: str, endpoints: str) -> None:
    docs = render("ops", {"monitoring.serving": {"enabled": True, "kind": kind}})
    (monitor,) = find(docs, kind)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    # The labels the operator puts on serving pods and Services (spyre_operator.render.meta).
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "spyre-model",
        "app.kubernetes.io/component": "server",
    }
    (endpoint,) = monitor["spec"][endpoints]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/metrics"


def test_monitors_in_namespaced_mode_look_only_where_the_operator_works() -> None:
    values = {
        "rbac.mode": "namespaced",
        "watchNamespaces": ["llm-a", "llm-b"],
        "monitoring.serving": {"enabled": True, "kind": "ServiceMonitor"},
        "monitoring.operator.enabled": True,
    }
    docs = render("ops", values)
    (serving,) = find(docs, "ServiceMonitor")
    assert serving["spec"]["namespaceSelector"] == {"matchNames": ["llm-a", "llm-b"]}
    (operator,) = find(docs, "PodMonitor")
    assert operator["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    assert operator["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    (deploy,) = find(docs, "Deployment")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert operator["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_serving_monitor_labels_match_what_the_operator_renders() -> None:
    examples = CHART.parents[1] / "examples"
    model = parse(load_documents((examples / "micro-granite-cpu.yaml").read_text())[0])
    docs = render("ops", {"monitoring.serving.enabled": True})
    selector = find(docs, "PodMonitor")[0]["spec"]["selector"]["matchLabels"]
    pod_labels = build_deployment(model)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert selector.items() <= build_service(model)["metadata"]["labels"].items()
    assert "http" in {p["name"] for p in build_service(model)["spec"]["ports"]}


BAD_VALUES: list[tuple[dict[str, Any], str]] = [
    ({"replicaCount": "two"}, "additional properties 'replicaCount' not allowed"),
    ({"rbac.mode": "everything"}, "/rbac/mode"),
    ({"rbac.mode": "namespaced"}, "/watchNamespaces"),
    ({"watchNamespaces": ["llm"]}, "/watchNamespaces"),
    ({"rbac.mode": "namespaced", "watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
    ({"image.pullPolicy": "Sometimes"}, "/image/pullPolicy"),
    ({"operator.logLevel": "loud"}, "/operator/logLevel"),
    ({"livenessProbe.port": "8080"}, "/livenessProbe/port"),
    ({"livenessProbe.port": 80}, "/livenessProbe/port"),
    ({"metrics.port": 8080}, "metrics.port: must differ from livenessProbe.port"),
    ({"operator.workers": 0}, "/operator/workers"),
    ({"operator.maxCompiles": -1}, "/operator/maxCompiles"),
    ({"operator.progressSeconds": -1}, "/operator/progressSeconds"),
    ({"operator.platform": "gke"}, "/operator/platform"),
    ({"operator.resyncSeconds": "5m"}, "/operator/resyncSeconds"),
    ({"runtimeImage.repository": "quay.io/spyre-serving/runtime:1"}, "/runtimeImage/repository"),
    ({"runtimeImage.pullSecrets": ["regcred"]}, "/runtimeImage/pullSecrets/0"),
    ({"runtimeImage.cards": "no"}, "/runtimeImage/cards"),
    ({"runtimeImage.injector": "Vault/Operator:1"}, "/runtimeImage/injector"),
    (
        {"metrics.enabled": False, "monitoring.operator.enabled": True},
        "monitoring.operator.enabled needs metrics.enabled=true",
    ),
    ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
    ({"resources": {"limit": {"memory": "1Gi"}}}, "additional properties 'limit' not allowed"),
    ({"monitoring.serving.kind": "Probe"}, "/monitoring/serving/kind"),
    ({"monitoring.serving.interval": "often"}, "/monitoring/serving/interval"),
    ({"serviceAccount.create": "yes"}, "/serviceAccount/create"),
    ({"webhook.failurePolicy": "Never"}, "/webhook/failurePolicy"),
    ({"webhook.timeoutSeconds": 60}, "/webhook/timeoutSeconds"),
    ({"webhook.certificates.source": "vault"}, "/webhook/certificates/source"),
]


def _case_id(values: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())


@pytest.mark.parametrize(("values", "field"), BAD_VALUES, ids=[_case_id(v) for v, _ in BAD_VALUES])
def test_a_wrong_value_fails_with_the_fields_name(values: dict[str, Any], field: str) -> None:
    result = template("ops", values)
    assert result.returncode != 0, result.stdout
    assert field in result.stderr, result.stderr


def test_values_yaml_documents_every_schema_property() -> None:
    """values.yaml is the documentation of the values: each schema key appears there."""
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(schema["properties"]) - {"global"} == set(values)


def _policy(values: dict[str, Any] | None = None) -> dict[str, Any]:
    (policy,) = find(render("ops", values), "NetworkPolicy")
    assert policy["metadata"]["namespace"] == "ops"
    return policy


def test_the_operators_policy_admits_its_own_ports_only() -> None:
    """Health and metrics from the release's namespace (`helm test`), the webhook from
    anywhere: its caller, the API server, is not a pod that a selector could match."""
    docs = render("ops")
    (deploy,) = find(docs, "Deployment")
    spec = _policy()["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= (
        deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    assert spec["policyTypes"] == ["Ingress"]  # egress (the API server) stays open
    probes, webhook = spec["ingress"]
    assert probes == {
        "from": [{"podSelector": {}}],
        "ports": [{"protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 8081}],
    }
    assert webhook == {"ports": [{"protocol": "TCP", "port": 9443}]}  # no `from`: anywhere
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    served = sorted(p["containerPort"] for p in container["ports"])
    admitted = sorted(p["port"] for rule in spec["ingress"] for p in rule["ports"])
    assert admitted == served


def test_the_operators_policy_follows_the_ports_and_the_peers() -> None:
    monitoring = {"namespaceSelector": {"matchLabels": {"team": "obs"}}}
    apiserver = {"ipBlock": {"cidr": "10.0.0.0/24"}}
    values = {
        "networkPolicy.metricsFrom": [monitoring],
        "networkPolicy.webhookFrom": [apiserver],
        "metrics.port": 9090,
        "webhook.port": 10443,
    }
    probes, webhook = _policy(values)["spec"]["ingress"]
    assert probes["from"] == [{"podSelector": {}}, monitoring]
    assert [p["port"] for p in probes["ports"]] == [8080, 9090]
    assert webhook == {"ports": [{"protocol": "TCP", "port": 10443}], "from": [apiserver]}
    (only,) = _policy({"metrics.enabled": False, "webhook.enabled": False})["spec"]["ingress"]
    assert only["ports"] == [{"protocol": "TCP", "port": 8080}]
    assert find(render("ops", {"networkPolicy.enabled": False}), "NetworkPolicy") == []


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"networkPolicy.metricsFrom": [{}]}, "minProperties"),
        ({"networkPolicy.webhookFrom": [{"ipBlock": {}}]}, "cidr"),
        ({"networkPolicy.metricsFrom": [{"namespaceSelectr": {}}]}, "namespaceSelectr"),
    ],
)
def test_wrong_policy_values_fail_with_the_field(values: dict[str, Any], fragment: str) -> None:
    result = template("ops", values)
    assert result.returncode != 0 and fragment in result.stderr, result.stderr
