"""The child manifests: names, labels, pod security, cards, probes, ownership."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import AFFINITY, COMMIT, example, merge, pinned, with_spec

from spyre_operator.api.validation import SpyreModel, parse
from spyre_operator.kube.client import Kube
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import (
    build_cache_pvc,
    build_compile_job,
    build_deployment,
    build_weights_job,
    desired,
    manifest_hash,
)
from spyre_operator.render.pod import cards
from spyre_operator.render.serving import build_pod_disruption_budget, build_service, endpoint_url
from spyre_operator.render.weights_job import weights_job_name

pytestmark = pytest.mark.unit


def _model(obj: dict[str, Any]) -> SpyreModel:
    """Parsed; a hub model pinned to a commit, as once its weights Job resolved it."""
    return parse(pinned(obj), "ai")


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


GRANITE = _model(example("granite-3.3-8b-instruct"))


def test_deployment_identity_and_labels() -> None:
    deploy = build_deployment(GRANITE)
    key = cache_key(GRANITE.spec)
    assert (deploy["metadata"]["name"], deploy["metadata"]["namespace"]) == (
        "granite-8b-instruct",
        "ai",
    )
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert labels[meta.MODEL_LABEL] == "granite-8b-instruct"
    assert labels[meta.CACHE_KEY_LABEL] == key[:12]
    assert labels["app.kubernetes.io/managed-by"] == "spyre-operator"
    assert deploy["metadata"]["annotations"] == {meta.CACHE_KEY_ANNOTATION: key}
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert meta.CACHE_KEY_LABEL not in selector  # selectors are immutable, keys are not
    assert selector.items() <= labels.items()
    assert meta.selector_string("granite-8b-instruct") == ",".join(
        f"{k}={v}" for k, v in selector.items()
    )


def test_serving_pod_is_restricted() -> None:
    pod = _pod(build_deployment(GRANITE))
    container = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "fsGroup" in pod["securityContext"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    weights = "/models/ibm-granite/granite-3.3-8b-instruct"
    assert mounts.keys() == {"/var/cache/spyre", "/dev/shm", "/tmp", "/home/spyre", weights}
    assert mounts[weights]["readOnly"] is True


@pytest.mark.parametrize("role", ["serve", "precompile"])
def test_home_and_working_directory_are_writable(role: str) -> None:
    job = build_compile_job(GRANITE.spec, "ai")
    pod = _pod(build_deployment(GRANITE) if role == "serve" else job)
    container = pod["containers"][0]
    home = next(e["value"] for e in container["env"] if e["name"] == "HOME")
    writable = {
        m["mountPath"]
        for m in container["volumeMounts"]
        if not m.get("readOnly")
        and "emptyDir" in next(v for v in pod["volumes"] if v["name"] == m["name"])
    }
    # the entrypoint copies the image's .senlib.json into HOME; vLLM and the HF hub write there
    assert home in writable
    # the image's WORKDIR is on the read-only root filesystem
    assert container["workingDir"] in writable


# What OpenShift's restricted-v2 SCC admits (its volumes list; ids and groups it assigns).
RESTRICTED_V2_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
SCC_ASSIGNED = {"runAsUser", "runAsGroup", "fsGroup", "supplementalGroups", "seLinuxOptions"}


@pytest.mark.parametrize("stem", ["granite-3.3-8b-instruct", "granite-8b-static-vllm-spyre"])
def test_openshift_pods_leave_ids_and_groups_to_the_scc(stem: str) -> None:
    model = _model(example(stem))
    job = build_compile_job(model.spec, "ai", platform="openshift")
    for pod in (_pod(build_deployment(model, platform="openshift")), _pod(job)):
        assert not SCC_ASSIGNED & pod["securityContext"].keys()
        container = pod["containers"][0]
        assert not SCC_ASSIGNED & container["securityContext"].keys()
        volumes = {k for v in pod["volumes"] for k in v if k != "name"}
        assert volumes <= RESTRICTED_V2_VOLUMES
        # the restricted Pod Security Standard still holds
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_only_the_pod_security_differs_between_platforms() -> None:
    kube, shift = build_deployment(GRANITE), build_deployment(GRANITE, platform="openshift")
    assert _pod(kube)["securityContext"].pop("fsGroup") == 2000
    assert kube == shift
    want = desired(GRANITE, platform="openshift")
    assert all("fsGroup" not in _pod(c)["securityContext"] for c in (want.job, want.deployment))


def test_cards_shm_and_scheduling_follow_tensor_parallelism() -> None:
    pod = _pod(build_deployment(GRANITE))
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["ibm.com/spyre_pf"] == "4"
    assert resources["requests"]["ibm.com/spyre_pf"] == "4"
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert pod["schedulerName"] == "spyre-scheduler"
    assert {"key": "ibm.com/spyre_pf", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_every_quantity_is_a_string() -> None:
    """Server-side apply refuses a number where the API has a quantity (500 "expected
    string"): cards, and amounts the user wrote as YAML integers, are rendered as strings."""
    amounts = {"cpu": 4, "memory": "8Gi", "example.com/fpga": 1}
    model = _model(
        with_spec(
            {
                "tensorParallelSize": 4,
                "resources": {"limits": amounts, "requests": amounts},
                "cache": {
                    "volume": {"size": 100},
                    "compile": {"resources": {"limits": {"cpu": 8}}},
                },
            }
        )
    )
    want = desired(model)
    pods = [_pod(want.deployment), _pod(want.job)]
    found = [
        value
        for pod in pods
        for kind in ("limits", "requests")
        for value in pod["containers"][0]["resources"].get(kind, {}).values()
    ]
    assert want.pvc is not None
    found.append(want.pvc["spec"]["resources"]["requests"]["storage"])
    assert len(found) > 8 and all(isinstance(v, str) for v in found), found
    assert _pod(want.deployment)["containers"][0]["resources"]["limits"]["cpu"] == "4"


def test_a_cpu_stand_in_holds_cards_as_a_card_model_does() -> None:
    """The same arithmetic for every backend: a CPU model with accelerator.count holds that
    many cards in its serving and compile pods, and is placed like a card model."""
    stand_in = _model(with_spec({"backend": "inductor", "accelerator": {"count": 4}}))
    compile_on_cards = {"cache": {"compile": {"backend": "sendnn"}}}
    card_model = _model(with_spec({"tensorParallelSize": 4, **compile_on_cards}))
    for role in ("serve", "precompile"):
        assert cards(stand_in.spec, role) == cards(card_model.spec, role) == 4
    for role in ("weights", "clean"):
        assert cards(stand_in.spec, role) == 0
    want = desired(stand_in)
    for obj in (want.deployment, want.job):
        pod = _pod(obj)
        assert pod["containers"][0]["resources"]["limits"]["ibm.com/spyre_pf"] == "4"
        assert {"key": "ibm.com/spyre_pf", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
    assert cards(_model(with_spec({"backend": "eager"})).spec, "serve") == 0  # the default


def _strategy(patch: dict[str, Any]) -> dict[str, Any]:
    strategy: dict[str, Any] = build_deployment(_model(with_spec(patch)))["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    return strategy["rollingUpdate"]


def test_card_models_roll_one_replica_at_a_time_without_a_surge_pod() -> None:
    assert _strategy({}) == {"maxSurge": 0, "maxUnavailable": 1}
    assert _strategy({"backend": "eager", "accelerator": {"count": 1}}) == {
        "maxSurge": 0,
        "maxUnavailable": 1,
    }
    # models without cards keep Kubernetes' default
    assert _strategy({"backend": "eager"}) == {"maxSurge": "25%", "maxUnavailable": "25%"}


def test_spec_rollout_overrides_the_default_field_by_field() -> None:
    assert _strategy({"rollout": {"maxSurge": 1}}) == {"maxSurge": 1, "maxUnavailable": 1}
    assert _strategy({"rollout": {"maxSurge": "50%", "maxUnavailable": 0}}) == {
        "maxSurge": "50%",
        "maxUnavailable": 0,
    }
    assert _strategy({"backend": "eager", "rollout": {"maxUnavailable": 2}}) == {
        "maxSurge": "25%",
        "maxUnavailable": 2,
    }


def test_a_disruption_budget_keeps_all_but_one_replica_of_two_or_more() -> None:
    assert build_pod_disruption_budget(_model(with_spec({"replicas": 1}))) is None
    model = _model(with_spec({"replicas": 2}))
    budget = build_pod_disruption_budget(model)
    assert budget is not None
    assert (budget["apiVersion"], budget["kind"]) == ("policy/v1", "PodDisruptionBudget")
    metadata = budget["metadata"]
    assert (metadata["name"], metadata["namespace"]) == (model.name, model.namespace)
    assert budget["spec"] == {
        "selector": {"matchLabels": meta.server_selector(model.name)},
        "maxUnavailable": 1,
    }
    selected = build_deployment(model)["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= selected.items()
    # a cluster that serves policy/v1beta1 only (1.20) gets it in that version
    old = Kube(None, policy="policy/v1beta1")  # no request made
    assert old.served(budget)["apiVersion"] == "policy/v1beta1"
    assert old.path("PodDisruptionBudget", "ns", "m") == (
        "/apis/policy/v1beta1/namespaces/ns/poddisruptionbudgets/m"
    )
    assert Kube(None).served(budget) is budget


def test_a_user_toleration_for_the_card_resource_is_kept_alone() -> None:
    toleration = {"key": "ibm.com/spyre_pf", "operator": "Exists"}
    pod = _pod(build_deployment(_model(with_spec({"tolerations": [toleration]}))))
    assert pod["tolerations"] == [toleration]


def test_probe_budget_depends_on_precompiled_graphs() -> None:
    def budget(patch: dict[str, Any]) -> tuple[int, int]:
        deploy = build_deployment(_model(with_spec(patch)))
        startup = _pod(deploy)["containers"][0]["startupProbe"]
        return startup["periodSeconds"] * startup["failureThreshold"], deploy["spec"][
            "progressDeadlineSeconds"
        ]

    precompiled, compiling = budget({}), budget({"cache": {"requirePrecompiled": False}})
    # at least upstream's 20 minutes (download, load, warmup), and the rollout waits longer
    assert precompiled == (1200, 1800)
    assert compiling[0] >= 3600 and compiling[1] > compiling[0]


def test_compile_job_is_shared_by_key_and_runs_on_cpu_when_asked() -> None:
    job = build_compile_job(GRANITE.spec, "ai")
    key = cache_key(GRANITE.spec)
    assert job["metadata"]["name"] == f"spyre-compile-{key[:12]}"
    assert meta.MODEL_LABEL not in job["metadata"]["labels"]  # shared by every model with the key
    spec = job["spec"]
    assert spec["backoffLimit"] == 1 and "activeDeadlineSeconds" not in spec
    pod = spec["template"]["spec"]
    assert pod["activeDeadlineSeconds"] == 10800  # from the pod's start: not the wait for cards
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    assert container["args"][0] == "precompile"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "ibm.com/spyre_pf" not in container["resources"]["limits"]  # sendnn_compile_only
    assert "schedulerName" not in pod and "tolerations" not in pod
    assert "startupProbe" not in container and "ports" not in container


def test_compile_job_on_cards_uses_the_serving_placement() -> None:
    obj = merge(
        example("granite-3.3-8b-instruct"), {"spec": {"cache": {"compile": {"backend": "sendnn"}}}}
    )
    pod = _pod(build_compile_job(_model(obj).spec, "ai"))
    assert pod["containers"][0]["resources"]["limits"]["ibm.com/spyre_pf"] == "4"
    assert pod["schedulerName"] == "spyre-scheduler"


def test_affinity_reaches_the_pods_exactly_as_written() -> None:
    patch = {"affinity": AFFINITY, "cache": {"compile": {"backend": "sendnn"}}}
    spec = _model(merge(example("granite-3.3-8b-instruct"), {"spec": patch})).spec
    assert _pod(build_deployment(SpyreModel("m", "ai", spec)))["affinity"] == AFFINITY
    assert _pod(build_compile_job(spec, "ai"))["affinity"] == AFFINITY  # a compile on cards


def test_compile_placement_overrides() -> None:
    patch = {
        "nodeSelector": {"spyre": "yes"},
        "cache": {"compile": {"nodeSelector": {"cpu": "big"}}},
    }
    pod = _pod(build_compile_job(_model(with_spec(patch)).spec, "ns"))
    assert pod["nodeSelector"] == {"cpu": "big"}


def test_models_on_volumes_are_mounted_read_only() -> None:
    pod = _pod(build_deployment(_model(example("granite-8b-static-vllm-spyre"))))
    volume = next(v for v in pod["volumes"] if v["name"] == "model")
    assert volume["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "model")
    assert mount == {"name": "model", "mountPath": "/models", "readOnly": True}
    host = {"model": {"path": "/m/x", "source": {"hostPath": {"path": "/srv", "mountPath": "/m"}}}}
    pod = _pod(build_deployment(_model(with_spec(host))))
    assert {"name": "model", "hostPath": {"path": "/srv", "type": "Directory"}} in pod["volumes"]


def test_service_and_endpoint() -> None:
    service = build_service(GRANITE)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
    ]
    assert (
        service["spec"]["selector"] == build_deployment(GRANITE)["spec"]["selector"]["matchLabels"]
    )
    assert endpoint_url(GRANITE) == "http://granite-8b-instruct.ai.svc:8000/v1"


def test_cache_pvc_is_shared_and_unowned() -> None:
    pvc = build_cache_pvc(GRANITE.spec, "ai")
    assert pvc["metadata"]["name"] == "spyre-graph-cache"
    assert pvc["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "500Gi"}},
    }
    assert "ownerReferences" not in desired(GRANITE, uid="u-1").objects()[0]["metadata"]
    with_class = build_cache_pvc(
        _model(with_spec({"cache": {"volume": {"storageClassName": "nfs"}}})).spec, "ns"
    )
    assert with_class["spec"]["storageClassName"] == "nfs"


def test_children_and_owner_references() -> None:
    names = [(c["kind"], c["metadata"]["name"]) for c in desired(GRANITE).objects()]
    assert [kind for kind, _ in names] == [
        "PersistentVolumeClaim", "Job", "Job", "NetworkPolicy", "Deployment", "Service"
    ]  # fmt: skip
    assert names[1][1].startswith("spyre-weights-") and names[2][1].startswith("spyre-compile-")
    existing_claim = _model(with_spec({"cache": {"volume": {"create": False}}}))
    assert desired(existing_claim).objects()[0]["kind"] == "Job"
    want = desired(GRANITE, uid="u-1")
    for shared in (want.weights, want.job):
        assert shared is not None
        assert shared["metadata"]["ownerReferences"][0]["controller"] is False
    assert want.deployment is not None
    ref = meta.owner_reference("granite-8b-instruct", "u-1")
    assert want.deployment["metadata"]["ownerReferences"] == [ref]
    for owned_child in (want.service, want.network_policy):
        assert owned_child["metadata"]["ownerReferences"] == [ref]
    assert not any("ownerReferences" in c["metadata"] for c in desired(GRANITE).objects())


def test_an_unresolved_hub_revision_has_only_the_weights_job() -> None:
    """The compile Job and the Deployment depend on the commit the revision resolves to."""
    model = parse(example("granite-3.3-8b-instruct"), "ai")
    want = desired(model)
    assert (want.job, want.deployment) == (None, None)
    assert want.weights is not None and want.service is not None
    with pytest.raises(ValueError, match=r"revision 'main' .* not resolved"):
        build_deployment(model)
    resolved = desired(model, commit=COMMIT)
    assert resolved.deployment == desired(GRANITE).deployment  # pinned to the same commit


def test_the_weights_job_downloads_with_the_token_and_the_others_never_see_it() -> None:
    job = build_weights_job(GRANITE.spec, "ai")
    pod = _pod(job)
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert (container["name"], container["args"]) == ("weights", ["weights"])
    assert env["SPYRE_SERVING_MODEL_ID"] == "ibm-granite/granite-3.3-8b-instruct"
    assert env["SPYRE_SERVING_MODEL_REVISION"] == COMMIT
    assert env["SPYRE_SERVING_CACHE_ROOT"] == "/var/cache/spyre"
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert env["HF_HUB_OFFLINE"] == "0" and "HF_ENDPOINT" not in env  # over an image's ENV
    assert pod["restartPolicy"] == "Never" and "affinity" not in pod
    assert container["resources"]["limits"] == {"memory": "4Gi"}  # no cards
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/cache/spyre"].get("readOnly") is not True
    for workload in (build_compile_job(GRANITE.spec, "ai"), build_deployment(GRANITE)):
        (c,) = _pod(workload)["containers"]
        names = {e["name"]: e.get("value") for e in c["env"]}
        assert "HF_TOKEN" not in names and names["HF_HUB_OFFLINE"] == "1"
        weights = next(m for m in c["volumeMounts"] if m.get("subPath"))
        assert weights == {
            "name": "graph-cache",
            "mountPath": "/models/ibm-granite/granite-3.3-8b-instruct",
            "subPath": f"weights/ibm-granite/granite-3.3-8b-instruct/{COMMIT}",
            "readOnly": True,
        }
        assert c["args"][1] == weights["mountPath"]


def test_the_weights_job_is_one_per_model_revision_endpoint_and_token() -> None:
    def name(**model: Any) -> str:
        return weights_job_name(parse(with_spec({"model": model})).spec)

    base = name(id="org/m")
    assert base == name(id="org/m", revision="main")  # main is the default
    assert base == name(id="org/m", quantization="gptq")  # the same download
    hub = {"hub": {"endpoint": "https://mirror.example"}}
    token = {"hub": {"tokenSecret": {"name": "t"}}}
    others = [
        name(id="org/m2"),
        name(id="org/m", revision="v1"),
        name(id="org/m", source=hub),
        name(id="org/m", source=token),
    ]
    assert len({base, *others}) == 5
    endpoint = build_weights_job(parse(with_spec({"model": {"source": hub}})).spec, "ai")
    env = {e["name"]: e.get("value") for e in _pod(endpoint)["containers"][0]["env"]}
    assert env["HF_ENDPOINT"] == "https://mirror.example"


def test_applied_objects_carry_the_hash_of_the_rest() -> None:
    """The hash covers the whole manifest (ownerReferences too): any change of the desired
    object, a removed field included, is a new hash."""
    want = desired(GRANITE, uid="u-1")
    for obj in (want.deployment, want.service):
        annotations = dict(obj["metadata"]["annotations"])
        digest = annotations.pop(meta.APPLIED_ANNOTATION)
        metadata = {k: v for k, v in obj["metadata"].items() if k != "annotations"}
        rest = obj | {"metadata": metadata | ({"annotations": annotations} if annotations else {})}
        assert digest == manifest_hash(rest)
    assert (
        want.job is not None and meta.APPLIED_ANNOTATION not in want.job["metadata"]["annotations"]
    )
    assert want.deployment != desired(GRANITE, uid="u-2").deployment
    no_scheduler = _model(
        merge(example("granite-3.3-8b-instruct"), {"spec": {"schedulerName": None}})
    )
    hashes = {
        desired(m).deployment["metadata"]["annotations"][meta.APPLIED_ANNOTATION]
        for m in (GRANITE, no_scheduler)
    }
    assert len(hashes) == 2


def test_builders_return_independent_objects() -> None:
    first = build_deployment(GRANITE)
    _pod(first)["securityContext"]["runAsNonRoot"] = False
    assert _pod(build_deployment(GRANITE))["securityContext"]["runAsNonRoot"] is True


def test_a_long_claim_name_is_a_valid_label_value_on_the_volume() -> None:
    """Found by the server fuzz test: a 253-character claim name (valid for a PVC) went
    into the volume's instance label (63 at most), and the API server refused the PVC."""
    long_names = ["a" * 253, "a" * 53 + "." + "b" * 100, "a" * 64]
    values = set()
    for name in long_names:
        model = parse(with_spec({"cache": {"volume": {"claimName": name}}}), "ai")
        value = build_cache_pvc(model.spec, "ai")["metadata"]["labels"][
            "app.kubernetes.io/instance"
        ]
        assert len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()
        values.add(value)
    assert len(values) == len(long_names)  # different names stay different
    assert meta.label_value("a" * 63) == "a" * 63
