"""The local control plane is real: API round-trips, schema validation, GC, namespaces."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from spyre_devcluster.simulate import poll_until
from spyre_operator.kube.client import MERGE, ApiError, Kube, load_api_client

pytestmark = pytest.mark.integration

GROUP = "probe.spyre.dev"


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    poll_until(predicate, what, timeout)


def gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_namespace_and_configmap_round_trip(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="probe"), data={"k": "v"})
    core.create_namespaced_config_map(namespace, body)
    read = core.read_namespaced_config_map("probe", namespace)
    assert read.data == {"k": "v"}
    assert namespace in {ns.metadata.name for ns in core.list_namespace().items if ns.metadata}


def test_crd_schema_rejects_with_the_api_servers_message(
    api_client: client.ApiClient, namespace: str
) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    plural = f"chunks{uuid.uuid4().hex[:6]}"
    crd: Any = {  # the client takes a plain dict as the body
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": f"Chunk{plural[6:]}"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"tokens": {"type": "integer", "multipleOf": 64}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:
        custom = client.CustomObjectsApi(api_client)
        kind = crd["spec"]["names"]["kind"]

        def create(tokens: int) -> object:
            body = {
                "apiVersion": f"{GROUP}/v1",
                "kind": kind,
                "metadata": {"name": f"t{tokens}"},
                "spec": {"tokens": tokens},
            }
            return custom.create_namespaced_custom_object(GROUP, "v1", namespace, plural, body)

        # The CRD becomes servable a moment after creation.
        wait_for(lambda: _served(create, 128), "the CRD to be served")
        with pytest.raises(ApiException) as err:
            create(100)
        assert err.value.status == 422
        assert "spec.tokens" in str(err.value.body)
        assert "multiple of 64" in str(err.value.body)
    finally:
        ext.delete_custom_resource_definition(f"{plural}.{GROUP}")


def _served(create: Callable[[int], object], tokens: int) -> bool:
    try:
        create(tokens)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_owned_deployment_is_garbage_collected(
    api_client: client.ApiClient, namespace: str
) -> None:
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    labels = {"app": "probe"}
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(
            name="owned",
            owner_references=[
                client.V1OwnerReference(
                    api_version="v1",
                    kind="ConfigMap",
                    name="owner",
                    uid=owner.metadata.uid if owner.metadata else None,
                )
            ],
        ),
        spec=client.V1DeploymentSpec(
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
            ),
        ),
    )
    apps.create_namespaced_deployment(namespace, deployment)
    core.delete_namespaced_config_map("owner", namespace)
    wait_for(
        lambda: gone(lambda: apps.read_namespaced_deployment("owned", namespace)),
        "the garbage collector to delete the owned Deployment",
    )


def test_deleted_namespace_really_goes_away(api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    name = f"gone-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    core.create_namespaced_config_map(
        name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="content"))
    )
    core.delete_namespace(name)
    wait_for(lambda: gone(lambda: core.read_namespace(name)), "the namespace controller")


def test_create_in_a_terminating_namespace_names_the_cause(kubeconfig: Path) -> None:
    """The 403 the operator recognises (ApiError.namespace_terminating) is what the API
    server really sends; a finalizer keeps the namespace Terminating meanwhile."""
    kube = Kube(load_api_client(str(kubeconfig)))
    name = f"ending-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    held = {"metadata": {"name": "held", "namespace": name, "finalizers": ["test/hold"]}}
    kube.request("POST", f"/api/v1/namespaces/{name}/configmaps", held)
    kube.request("DELETE", f"/api/v1/namespaces/{name}")
    attempts = iter(range(1000))

    def refusal() -> ApiError | None:
        """Create a Service; the API server's namespace cache may lag the DELETE a moment."""
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": f"s{next(attempts)}", "namespace": name},
                   "spec": {"ports": [{"port": 80}]}}  # fmt: skip
        try:
            kube.create(service)
        except ApiError as err:
            return err
        return None

    try:
        refused = poll_until(refusal, "a create in the terminating namespace refused", 90.0)
        assert refused.namespace_terminating, refused.body
    finally:
        kube.request(
            "PATCH",
            f"/api/v1/namespaces/{name}/configmaps/held",
            {"metadata": {"finalizers": None}},
            content_type=MERGE,
        )
    core = client.CoreV1Api(load_api_client(str(kubeconfig)))
    wait_for(lambda: gone(lambda: core.read_namespace(name)), "the namespace controller")
