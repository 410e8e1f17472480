"""Defaults that exist: where the operator has no serving image for cards (a release's
chart: `runtimeImage.cards` false), a model on cards without spec.image is refused with
what to set; the injected runtime's image is a setting (`--runtime-injector-image`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from apilib import pinned, with_spec

from spyre_operator.api import runtimes
from spyre_operator.api.problem import InvalidSpec
from spyre_operator.api.runtimes import RuntimeImages
from spyre_operator.api.validation import parse, review, validate
from spyre_operator.controller.indexes import model_entry
from spyre_operator.kube.client import Kube
from spyre_operator.reconcile.engine import Reconciler
from spyre_operator.render.children import desired
from spyre_operator.settings import SettingsError, from_env
from spyre_operator.webhook.review import Answer, answer

pytestmark = pytest.mark.unit

CPU_ONLY = RuntimeImages("reg.example:5000/rel/runtime-cpu", cards=False)
IBM = "quay.io/ibm-aiu/sendnn-inference:2.6.3.amd64"


def _doc(patch: dict[str, Any]) -> dict[str, Any]:
    return pinned(with_spec(patch))


def _problems(patch: dict[str, Any], images: RuntimeImages = CPU_ONLY) -> list[str]:
    return [str(p) for p in validate(_doc(patch), images)]


@pytest.mark.parametrize(
    ("flavour", "profile", "example"),
    [("sendnn-inference", "sendnn-inference", IBM),
     ("vllm-spyre", "openshift-ai", "registry.redhat.io/rhaiis/vllm-spyre-rhel9:<version>")],
)  # fmt: skip
def test_a_card_model_without_an_image_is_refused_with_the_family_to_name(
    flavour: str, profile: str, example: str
) -> None:
    spec = {"runtime": {"flavour": flavour}}
    (problem,) = _problems(spec)
    assert problem.startswith("spec.image: is required for backend sendnn (Spyre cards)")
    assert "runtimeImage.cards is false" in problem
    assert f"spec.runtime.imageProfile: {profile} (e.g. {example})" in problem
    assert "backend eager or inductor" in problem
    assert _problems(spec, RuntimeImages(CPU_ONLY.repository)) == []  # cards: true


@pytest.mark.parametrize(
    "spec",
    [{"backend": "inductor"}, {"backend": "eager"}, {"image": "reg.example/own/vllm:1"},
     {"image": IBM, "runtime": {"imageProfile": "sendnn-inference"}}],
)  # fmt: skip
def test_cpu_models_and_models_that_name_their_image_are_not(spec: dict[str, Any]) -> None:
    assert _problems(spec) == []


def test_an_upstream_family_without_an_image_is_told_once() -> None:
    (problem,) = _problems({"runtime": {"imageProfile": "sendnn-inference"}})
    assert "runs the image you name, unmodified" in problem


def test_the_reconcile_its_index_and_the_webhook_judge_by_the_operator_s_images() -> None:
    """`--runtime-image-cards=false` reaches each of them as a value, never as state the
    process keeps: the reconcile (its settings), the index the compile queue reads, the
    admission webhook (`run`'s settings, handlers.py)."""
    doc = _doc({}) | {"status": {"weights": {"state": "Ready", "commit": "a" * 40}}}
    doc["metadata"] |= {"uid": "u-1", "generation": 1}
    told = from_env({"SPYRE_OPERATOR_RUNTIME_IMAGE_CARDS": "false"})
    images = told.runtime_images
    assert parse(doc).spec.image is None  # the defaults have card images
    with pytest.raises(InvalidSpec) as refused:
        parse(doc, images=images)
    assert [p.path for p in refused.value.problems] == ["spec.image"]
    assert [p.path for p in review(doc, images=images).problems] == ["spec.image"]

    webhook = answer("CREATE", doc, None, images).refusal or ""
    assert webhook.startswith("spec.image: is required") and answer("CREATE", doc, None) == Answer()
    (refused_entry,) = model_entry(doc, images).values()
    (entry,) = model_entry(doc, runtimes.DEFAULT_IMAGES).values()
    assert refused_entry.want is None and entry.want is not None  # the compile queue's
    reconciler = Reconciler(Kube(api=None), lambda *_: None, settings=told)
    status = reconciler.plan(doc, "T").status.to_k8s()
    assert status["phase"] == "Invalid" and "spec.image" in status["conditions"][0]["message"]


def test_cards_and_the_injector_are_settings() -> None:
    assert from_env({}).runtime_images == runtimes.DEFAULT_IMAGES
    environ = {
        "SPYRE_OPERATOR_RUNTIME_IMAGE_REPOSITORY": "mirror.example/ai/runtime-cpu",
        "SPYRE_OPERATOR_RUNTIME_IMAGE_CARDS": "false",
        "SPYRE_OPERATOR_RUNTIME_INJECTOR_IMAGE": "vault.example/spyre/operator:0.1.0",
    }
    images = from_env(environ).runtime_images
    assert not images.cards
    assert images.injector_image == "vault.example/spyre/operator:0.1.0"
    environ["SPYRE_OPERATOR_RUNTIME_INJECTOR_IMAGE"] = ""  # the chart's "": derived
    assert from_env(environ).runtime_images.injector_image.startswith("mirror.example/ai/operator:")


@pytest.mark.parametrize(
    ("environ", "says"),
    [({"SPYRE_OPERATOR_RUNTIME_INJECTOR_IMAGE": "Vault/Op:1"}, "--runtime-injector-image"),
     ({"SPYRE_OPERATOR_RUNTIME_IMAGE_CARDS": "maybe"}, "--runtime-image-cards")],
)  # fmt: skip
def test_wrong_image_settings_name_their_flag(environ: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        from_env(environ)


def test_the_init_container_runs_the_injector_setting() -> None:
    images = RuntimeImages(CPU_ONLY.repository, injector=f"vault.example/op@sha256:{'a' * 64}")
    model = parse(_doc({"image": IBM, "runtime": {"imageProfile": "sendnn-inference"}}), "ns")
    want = desired(model, "u-1", images=images)
    assert want.job is not None and want.deployment is not None
    for obj in (want.job, want.deployment):
        (init,) = obj["spec"]["template"]["spec"]["initContainers"]
        assert init["image"] == images.injector


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyre_operator", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_validate_and_render_judge_as_the_operator_told(tmp_path: Path) -> None:
    file = tmp_path / "card.yaml"
    file.write_text(yaml.safe_dump(_doc({})))
    assert _cli("validate", str(file)).returncode == 0
    for command in ("validate", "render"):
        done = _cli(command, "--runtime-image-cards=false", str(file))
        assert done.returncode == 2, done.stderr
        assert f"{file}: demo: spec.image: is required for backend sendnn" in done.stderr
        assert done.stdout == ""
