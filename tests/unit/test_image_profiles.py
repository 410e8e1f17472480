"""Image profiles (api/profiles.py): per image family the plugin, the injected runtime and
the scheduler; per architecture the device resource and the nodes; what enters the key."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import merge, pinned, with_spec

from spyre_operator.api import imageref, profiles
from spyre_operator.api.validation import SpyreModel, parse, validate
from spyre_operator.render.cachekey import cache_key
from spyre_operator.render.children import build_cleanup_job, desired
from spyre_runtime.contract import FLAVOURS

pytestmark = pytest.mark.unit

IBM = "quay.io/ibm-aiu/sendnn-inference:2.6.3.s390x"
UPSTREAM = {"imageProfile": "sendnn-inference"}


def _doc(patch: dict[str, Any]) -> dict[str, Any]:
    return pinned(with_spec(patch))


def _model(patch: dict[str, Any]) -> SpyreModel:
    return parse(_doc(patch), "ns")


def _pods(model: SpyreModel) -> dict[str, dict[str, Any]]:
    want = desired(model, "u-1")
    assert want.weights is not None and want.job is not None and want.deployment is not None
    objects = {"weights": want.weights, "compile": want.job, "serve": want.deployment}
    objects["clean"] = build_cleanup_job(model, "u-1")
    return {role: obj["spec"]["template"]["spec"] for role, obj in objects.items()}


def _problems(patch: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate(_doc(patch))]


def test_each_family_names_a_real_flavour_and_an_image_of_its_own() -> None:
    for name, profile in profiles.PROFILES.items():
        assert profile.name == name
        assert profile.flavour is None or profile.flavour in FLAVOURS
        if profile.injected:  # its example is recognised as the family's image
            example = profile.example.replace("<version>", "1.0")
            assert imageref.IMAGE_REF.fullmatch(example)
            assert profiles.upstream_profile(imageref.parse(example).path) == name
    assert set(profiles.PROFILE_NAMES) == set(profiles.PROFILES)


@pytest.mark.parametrize(
    ("arch", "resource", "device"),
    [(None, "ibm.com/spyre_pf", "PF"), ("amd64", "ibm.com/spyre_pf", "PF"),
     ("ppc64le", "ibm.com/spyre_pf", "PF"), ("s390x", "ibm.com/spyre_vf", "VF")],
)  # fmt: skip
def test_the_card_resource_and_flex_device_follow_the_architecture(
    arch: str | None, resource: str, device: str
) -> None:
    model = _model({"runtime": {"architecture": arch}} if arch else {})
    serve = _pods(model)["serve"]
    (container,) = serve["containers"]
    assert container["resources"]["limits"][resource] == "1"
    assert {"name": "FLEX_DEVICE", "value": device} in container["env"]
    selector = serve.get("nodeSelector", {})
    assert selector.get(profiles.ARCH_LABEL) == arch
    # an explicit resource wins over the architecture's default
    aiu = _model(
        {"runtime": {"architecture": "s390x"}, "accelerator": {"resourceName": "ibm.com/aiu_pf"}}
    )
    assert aiu.spec.accelerator.resource_name == "ibm.com/aiu_pf"


def test_every_pod_runs_on_the_images_architecture() -> None:
    model = _model({"runtime": {"architecture": "ppc64le"}, "nodeSelector": {"zone": "a"}})
    for role, pod in _pods(model).items():
        assert pod["nodeSelector"][profiles.ARCH_LABEL] == "ppc64le", role
    assert _pods(model)["serve"]["nodeSelector"]["zone"] == "a"
    # without the field no pod gets the selector (what every spec rendered before)
    for pod in _pods(_model({})).values():
        assert profiles.ARCH_LABEL not in pod.get("nodeSelector", {})


def test_a_selector_of_another_architecture_is_refused() -> None:
    problems = _problems(
        {"runtime": {"architecture": "s390x"}, "nodeSelector": {profiles.ARCH_LABEL: "amd64"}}
    )
    assert problems == [
        "spec.nodeSelector[kubernetes.io/arch]: is 'amd64' but spec.runtime.architecture is "
        "s390x: remove the selector (the architecture sets it) or change the architecture"
    ]
    assert not _problems({"runtime": {"architecture": "s390x"},
                          "nodeSelector": {profiles.ARCH_LABEL: "s390x"}})  # fmt: skip


@pytest.mark.parametrize(
    ("patch", "scheduler"),
    [
        ({}, None),  # the operator's own image: the cluster's default, as before
        ({"runtime": UPSTREAM, "image": IBM}, "spyre-scheduler"),
        ({"runtime": UPSTREAM, "image": IBM, "accelerator": {"resourceName": "ibm.com/aiu_pf"}},
         "aiu-scheduler"),
        ({"runtime": UPSTREAM, "image": IBM, "schedulerName": "mine"}, "mine"),
    ],
)  # fmt: skip
def test_upstream_families_use_the_spyre_scheduler_for_card_pods(
    patch: dict[str, Any], scheduler: str | None
) -> None:
    pods = _pods(_model(patch))
    assert pods["serve"].get("schedulerName") == scheduler
    assert "schedulerName" not in pods["weights"]  # no card, any scheduler


def test_a_cpu_stand_in_without_cards_keeps_the_default_scheduler() -> None:
    model = _model({"runtime": UPSTREAM, "image": IBM, "backend": "eager"})
    assert "schedulerName" not in _pods(model)["serve"]


def test_a_family_with_another_plugin_is_refused_with_the_flavour_to_set() -> None:
    problems = _problems(
        {"runtime": {"imageProfile": "openshift-ai"}, "image": "r.io/rhaiis/vllm-spyre:1"}
    )
    assert problems == [
        "spec.runtime.flavour: the openshift-ai images carry the vllm-spyre plugin, not "
        "sendnn-inference: set runtime.flavour: vllm-spyre"
    ]
    ok = {"runtime": {"imageProfile": "openshift-ai", "flavour": "vllm-spyre"}, "image": "r.io/x:1"}
    assert not _problems(ok)


def test_an_upstream_family_needs_its_image_named() -> None:
    (problem,) = _problems({"runtime": UPSTREAM})
    assert problem.startswith("spec.image: spec.runtime.imageProfile sendnn-inference runs")
    assert "quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64" in problem


@pytest.mark.parametrize(
    "image",
    ["quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64", "mirror:5000/ibm-aiu/vllm-spyre:1.10.0.amd64",
     "registry.redhat.io/rhaiis/vllm-spyre-rhel9:3.2"],
)  # fmt: skip
def test_an_upstream_image_with_the_own_image_profile_is_refused(image: str) -> None:
    (problem,) = _problems({"image": image})
    assert problem.startswith("spec.runtime.imageProfile: ")
    assert "without spyre-runtime" in problem
    assert problem.endswith("and the operator brings the runtime to it")


def test_the_key_has_the_architecture_but_not_the_profile() -> None:
    own = cache_key(_model({"image": "example.com/vllm:1"}).spec)
    injected = cache_key(_model({"image": "example.com/vllm:1", "runtime": UPSTREAM}).spec)
    assert own == injected  # the same vLLM and plugin, wherever spyre-runtime comes from
    assert cache_key(_model({}).spec) == cache_key(
        _model({"runtime": {"architecture": "amd64"}}).spec
    )
    keys = {
        cache_key(_model({"runtime": {"architecture": a}}).spec) for a in profiles.ARCHITECTURES
    }
    assert len(keys) == len(profiles.ARCHITECTURES)


def test_an_example_doc_round_trips_the_new_fields() -> None:
    doc = merge(
        _doc({"runtime": UPSTREAM, "image": IBM}), {"spec": {"runtime": {"architecture": "s390x"}}}
    )
    spec = parse(doc, "ns").spec
    assert spec.to_k8s()["runtime"] == {
        "flavour": "sendnn-inference", "imageProfile": "sendnn-inference", "architecture": "s390x"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("image", "tagged"),
    [("quay.io/ibm-aiu/sendnn-inference:2.6.3.s390x", "s390x"),
     ("reg:5000/a/b:1-ppc64le", "ppc64le"),
     ("quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64@sha256:" + "a" * 64, "amd64"),
     ("reg:5000/amd64/x:1", None), ("x:latest", None), ("x", None)],
)  # fmt: skip
def test_the_architecture_an_image_tag_names(image: str, tagged: str | None) -> None:
    assert profiles.tagged_architecture(image) == tagged


def test_an_image_tagged_for_another_architecture_is_refused() -> None:
    image = "quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64"
    spec = {"runtime": {**UPSTREAM, "architecture": "s390x"}, "image": image}
    assert _problems(spec) == [
        f"spec.runtime.architecture: is s390x but the image's tag names amd64 ('{image}'): use "
        "the image's .s390x tag, or set architecture: amd64"
    ]
    assert not _problems({**spec, "runtime": {**UPSTREAM, "architecture": "amd64"}})
