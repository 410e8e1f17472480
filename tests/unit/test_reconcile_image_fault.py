"""An image that cannot run (reconcile/image_fault.py): the container states that say so,
and decide() turning each into reason ImageUnusable, naming the image and the setting to
change, with a Warning Event; never a crash loop or a retrying Job that says nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from test_reconcile_decide import (
    UID,
    body,
    cond,
    failed,
    job,
    ready_state,
    served,
    step,
)

from spyre_operator.api.validation import parse
from spyre_operator.reconcile.conditions import find
from spyre_operator.reconcile.image_fault import INJECTOR, fault
from spyre_operator.reconcile.pods import pod_issues
from spyre_operator.reconcile.views import deployment_view, job_view
from spyre_operator.reconcile.weights_status import weights_summary
from spyre_operator.render.children import desired
from spyre_operator.render.inject import INIT_CONTAINER
from spyre_operator.render.weights_job import weights_job_name
from spyre_runtime.contract import IMAGE_UNUSABLE

pytestmark = pytest.mark.unit

IMAGE = "registry.example.com/rhaiis/vllm-spyre-rhel9:3.2"
UPSTREAM = {"image": IMAGE, "runtime": {"imageProfile": "openshift-ai"}}
FOREIGN = "exec /opt/vllm/bin/python3: exec format error"
NO_PYTHON = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "python3": executable file '
    "not found in $PATH: unknown"
)
PULL = f'Back-off pulling image "{IMAGE}": not found'
NO_VLLM = "the image's Python (/usr/bin/python3) has no vLLM: name a vLLM-Spyre image in spec.image"


@pytest.mark.parametrize(
    ("container", "reason", "message", "says"),
    [
        ("vllm", "ImagePullBackOff", PULL, [f"image {IMAGE} cannot be pulled (ImagePullBackOff: "
         f"{PULL})", "check that spec.image names", "spec.imagePullSecrets"]),
        (INIT_CONTAINER, "ErrImagePull", "not found", ["cannot be pulled (ErrImagePull: not "
         f"found): check that {INJECTOR} names"]),
        ("vllm", "InvalidImageName", "couldn't parse", ["is not a valid image reference "
         "(InvalidImageName: couldn't parse): correct spec.image"]),
        ("vllm", "Error", FOREIGN, [f"is not built for the node's CPU ({FOREIGN})",
         "spec.runtime.architecture"]),
        ("vllm", "ErrImagePull", "failed to pull and unpack image: no match for platform in "
         "manifest: not found", ["is not built for the node's CPU (failed to pull"]),
        ("precompile", "StartError", NO_PYTHON, ['has no program to start (failed to create',
         "name a vLLM-Spyre image (with python3 on its PATH) in spec.image"]),
        ("precompile", IMAGE_UNUSABLE, NO_VLLM, [f"image {IMAGE}: {NO_VLLM}"]),
        ("precompile", "CreateContainerConfigError", "container has runAsNonRoot and image "
         "will run as root (pod: ...)", ["does not run as a non-root uid (container has",
         "name an image whose USER is a numeric uid other than 0 in spec.image"]),
    ],
)  # fmt: skip
def test_each_way_an_image_cannot_run_names_it_and_the_fix(
    container: str, reason: str, message: str, says: list[str]
) -> None:
    said = fault(container, IMAGE, reason, message)
    assert said is not None
    for words in says:
        assert words in said, said


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("OOMKilled", ""),
        ("CrashLoopBackOff", "back-off 40s restarting failed container=vllm"),
        ("Error", "FileNotFoundError: [Errno 2] No such file or directory: '/models/x'"),
        ("CreateContainerConfigError", 'secret "key" not found'),
        ("ContainerCreating", ""),
    ],
)
def test_what_is_not_the_images_fault_is_left_to_the_other_reasons(
    reason: str, message: str
) -> None:
    assert fault("vllm", IMAGE, reason, message) is None


def _pod(
    template: dict[str, Any], name: str, state: dict[str, Any], container: str | None = None
) -> dict[str, Any]:
    """A pod of `template` (a Job's or Deployment's pod spec) whose `container` (its main
    one by default) is in `state`, its image as the kubelet reports it."""
    containers = template["containers"] + template.get("initContainers", [])
    container = container or containers[0]["name"]
    image = next(c["image"] for c in containers if c["name"] == container)
    key = "initContainerStatuses" if container == INIT_CONTAINER else "containerStatuses"
    return {
        "metadata": {"name": name, "creationTimestamp": "2030-01-01T00:00:00Z"},
        "spec": copy.deepcopy(template),
        "status": {"phase": "Pending", key: [{"name": container, "image": image, **state}]},
    }


def _degraded(plan: Any) -> str:
    assert plan.status.to_k8s()["phase"] == "Failed"
    assert cond(plan, "Degraded") == ("True", IMAGE_UNUSABLE)
    assert cond(plan, "CacheReady") == ("False", IMAGE_UNUSABLE)
    (event,) = plan.events
    assert (event.type, event.reason) == ("Warning", IMAGE_UNUSABLE)
    message: str = find(plan.status.to_k8s()["conditions"], "Degraded")["message"]
    assert event.message == message
    return message


def test_a_compile_pod_of_another_architecture_fails_the_compile_as_image_unusable() -> None:
    obj = body(UPSTREAM)
    live = job(obj, **failed())
    template = live["spec"]["template"]["spec"]
    ended = {"state": {"terminated": {"reason": "Error", "exitCode": 255, "message": FOREIGN}}}
    plan = step(obj, pvc_exists=True, job=job_view(live, [_pod(template, "c-0", ended)]))
    message = _degraded(plan)
    assert message.startswith(f"the compile pod c-0: image {IMAGE} is not built for the node")
    assert plan.status.to_k8s()["cache"]["reason"] == IMAGE_UNUSABLE


def test_the_runtimes_own_refusal_names_the_image() -> None:
    obj = body(UPSTREAM)
    live = job(obj, **failed())
    summary = json.dumps({"ok": False, "reason": IMAGE_UNUSABLE, "message": NO_VLLM})
    ended = {"state": {"terminated": {"reason": "Error", "exitCode": 2, "message": summary}}}
    template = live["spec"]["template"]["spec"]
    plan = step(obj, pvc_exists=True, job=job_view(live, [_pod(template, "c-0", ended)]))
    assert _degraded(plan).startswith(f"the compile pod c-0: image {IMAGE}: {NO_VLLM}.")


@pytest.mark.parametrize("container", [None, INIT_CONTAINER])
def test_a_compile_pod_whose_image_is_not_pulled_is_image_unusable_until_it_is(
    container: str | None,
) -> None:
    obj = body(UPSTREAM)
    live = job(obj, active=1)
    template = live["spec"]["template"]["spec"]
    waiting = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": PULL}}}
    pods = [_pod(template, "c-0", waiting, container)]
    plan = step(obj, pvc_exists=True, job=job_view(live, pods))
    message = _degraded(plan)
    assert message.startswith("the compile of cache ") and "cannot start: pod c-0: image" in message
    field = INJECTOR if container else "spec.image"
    assert f"check that {field} names" in message
    assert cond(plan, "Progressing") == ("False", IMAGE_UNUSABLE)
    assert plan.actions == []  # the Job keeps trying to pull: nothing to redo

    pulled = _pod(template, "c-0", {"state": {"running": {}}})
    again = step(
        body(UPSTREAM, **plan.status.to_k8s()), pvc_exists=True, job=job_view(live, [pulled])
    )
    assert again.status.to_k8s()["phase"] == "Compiling"
    assert cond(again, "Degraded") == ("False", "AsExpected")


def test_a_serving_pod_of_another_architecture_degrades_the_model() -> None:
    kwargs, status = ready_state(UPSTREAM)
    live = kwargs["deployment"].live
    template = live["spec"]["template"]["spec"]
    crashing = {
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"reason": "Error", "exitCode": 255, "message": FOREIGN}},
    }
    issues = pod_issues([_pod(template, "srv-0", crashing)])
    down = deployment_view(served(live, available=False))
    plan = step(body(UPSTREAM, **status), **(kwargs | {"deployment": down, "pod_issues": issues}))
    assert plan.status.to_k8s()["phase"] == "Degraded"
    assert cond(plan, "Available") == ("False", IMAGE_UNUSABLE)
    assert cond(plan, "Degraded") == ("True", IMAGE_UNUSABLE)
    message = find(plan.status.to_k8s()["conditions"], "Degraded")["message"]
    assert message.startswith(f"serving pod srv-0: image {IMAGE} is not built for the node's CPU")
    (event,) = plan.events
    assert (event.type, event.reason) == ("Warning", IMAGE_UNUSABLE)


def test_a_weights_pod_that_cannot_run_is_told_while_the_job_retries() -> None:
    obj = body(UPSTREAM)
    spec = parse(obj).spec
    name = weights_job_name(spec)
    weights = desired(parse(obj), UID).weights
    assert weights is not None
    live = {
        "metadata": {"name": name, "ownerReferences": [{"uid": UID}]},
        "status": {"active": 1, "failed": 1},
    }
    ended = {
        "state": {"terminated": {"reason": "StartError", "exitCode": 128, "message": NO_PYTHON}}
    }
    pods = [_pod(weights["spec"]["template"]["spec"], f"{name}-0", ended)]
    view = job_view(live, pods, "weights")
    summary = weights_summary(spec, view, {})
    assert summary is not None and summary.state == "Failed"
    assert summary.reason == IMAGE_UNUSABLE
    assert (summary.message or "").startswith(f"the weights pod {name}-0: image {IMAGE} has no")


def test_an_injector_of_another_architecture_is_named_with_its_setting() -> None:
    """The init container that copies spyre-runtime never ran its copy: the compile's
    failure and a serving pod's crash loop name the operator's injector image."""
    obj = body(UPSTREAM)
    live = job(obj, **failed())
    template = live["spec"]["template"]["spec"]
    ended = {"state": {"terminated": {"reason": "Error", "exitCode": 255, "message": FOREIGN}}}
    pods = [_pod(template, "c-0", ended, INIT_CONTAINER)]
    message = _degraded(step(obj, pvc_exists=True, job=job_view(live, pods)))
    injector = template["initContainers"][0]["image"]
    assert message.startswith(f"the compile pod c-0: image {injector} is not built for"), message
    assert INJECTOR in message

    kwargs, status = ready_state(UPSTREAM)
    serving = kwargs["deployment"].live["spec"]["template"]["spec"]
    crashing = {
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": ended["state"],
    }
    issues = pod_issues([_pod(serving, "srv-0", crashing, INIT_CONTAINER)])
    down = deployment_view(served(kwargs["deployment"].live, available=False))
    plan = step(body(UPSTREAM, **status), **(kwargs | {"deployment": down, "pod_issues": issues}))
    assert cond(plan, "Degraded") == ("True", IMAGE_UNUSABLE)
    said = find(plan.status.to_k8s()["conditions"], "Degraded")["message"]
    assert (
        said.startswith(f"serving pod srv-0: image {injector} is not built for")
        and INJECTOR in said
    )
