"""The serving image is configurable (--runtime-image-repository, --runtime-image-pull-secret)
and mirror-safe: moving it to another registry keeps every cache key."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from apilib import example, merge, pinned

from spyre_operator.api import imageref
from spyre_operator.api.runtimes import DEFAULT_IMAGES, RuntimeImages, default_image
from spyre_operator.api.validation import SpyreModel, parse
from spyre_operator.render import meta
from spyre_operator.render.cachekey import cache_key, compile_config
from spyre_operator.render.children import build_cleanup_job, desired
from spyre_operator.settings import SettingsError, from_env

pytestmark = pytest.mark.unit

GRANITE = example("granite-3.3-8b-instruct")
MIRROR = RuntimeImages("mirror.example.com:5000/ai/spyre-runtime", ("mirror-pull",))
TAG = "0.1.0-sendnn-inference-2.6.3"
DIGEST = f"sha256:{'a' * 64}"


def _model(spec: dict[str, Any] | None = None) -> SpyreModel:
    return parse(pinned(merge(GRANITE, {"spec": spec or {}})), "ai")


def _key(image: str | None) -> str:
    return cache_key(_model({"image": image}).spec)


def _pods(model: SpyreModel, images: RuntimeImages) -> list[dict[str, Any]]:
    want = desired(model, "u-1", images=images)
    pods = [obj["spec"]["template"]["spec"] for obj in (want.weights, want.job, want.deployment)
            if obj is not None]  # fmt: skip
    clean = build_cleanup_job(model, "u-1", images=images)
    return [*pods, clean["spec"]["template"]["spec"]]


@pytest.mark.parametrize(
    ("reference", "split"),
    [
        ("quay.io/spyre-serving/runtime:1", ("quay.io", "spyre-serving/runtime", "1", None)),
        ("127.0.0.1:5000/a/b@" + DIGEST, ("127.0.0.1:5000", "a/b", None, DIGEST)),
        ("localhost/x:2@" + DIGEST, ("localhost", "x", "2", DIGEST)),
        ("spyre-serving/runtime:3", (None, "spyre-serving/runtime", "3", None)),
        ("ubuntu", (None, "ubuntu", None, None)),
        ("reg:443/ubuntu", ("reg:443", "ubuntu", None, None)),
    ],
)
def test_a_reference_splits_as_the_runtime_reads_it(
    reference: str, split: tuple[str | None, ...]
) -> None:
    ref = imageref.parse(reference)
    assert (ref.registry, ref.path, ref.tag, ref.digest) == split
    assert reference.endswith(ref.without_registry)


def test_the_default_repository_is_configurable() -> None:
    model = _model()
    assert model.spec.image_ref() == f"quay.io/spyre-serving/runtime:{TAG}"
    assert model.spec.image_ref(MIRROR) == f"mirror.example.com:5000/ai/spyre-runtime:{TAG}"
    for pod in _pods(model, MIRROR):
        assert pod["containers"][0]["image"] == MIRROR.image("sendnn-inference", "2.6.3")
    # a SpyreModel's own image is its own
    own = _model({"image": "example.com/me/vllm:1"})
    assert {p["containers"][0]["image"] for p in _pods(own, MIRROR)} == {"example.com/me/vllm:1"}


def test_the_operators_pull_secrets_come_first_then_the_models_each_once() -> None:
    secrets = [{"name": "mine"}, {"name": "mirror-pull"}]
    model = _model({"imagePullSecrets": secrets})
    for pod in _pods(model, MIRROR):
        assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}, {"name": "mine"}]
    for pod in _pods(_model(), DEFAULT_IMAGES):
        assert "imagePullSecrets" not in pod


def test_moving_the_runtime_repository_keeps_every_key() -> None:
    """The operator's flag moves every SpyreModel without spec.image: the pods roll onto
    the mirror (the image changes), the cache key and the compile Job stay."""
    model = _model()
    here, there = desired(model, "u-1"), desired(model, "u-1", images=MIRROR)
    assert here.job is not None and there.job is not None
    assert here.job["metadata"]["name"] == there.job["metadata"]["name"]
    assert here.deployment is not None and there.deployment is not None
    keys = [
        d["metadata"]["labels"][meta.CACHE_KEY_LABEL] for d in (here.deployment, there.deployment)
    ]
    assert keys[0] == keys[1]
    assert here.deployment != there.deployment  # the rollout onto the mirror's image


@pytest.mark.parametrize(
    "mirrored",
    [
        f"mirror.example.com/spyre-serving/runtime:{TAG}",
        f"mirror.example.com:5000/quay.io/spyre-serving/runtime:{TAG}",  # a prefixing mirror
        f"127.0.0.1:5000/spyre-serving/runtime:{TAG}",
        f"spyre-serving/runtime:{TAG}",
    ],
)
def test_the_operators_own_image_under_any_registry_is_the_runtime(mirrored: str) -> None:
    assert _key(mirrored) == _key(f"quay.io/spyre-serving/runtime:{TAG}") == _key(None)
    assert "image" not in compile_config(_model({"image": mirrored}).spec)


def test_another_image_is_keyed_without_its_registry() -> None:
    """A tag keeps its path and tag, a digest its digest: a mirror or an air-gapped copy of
    the same image keeps every key; another image or tag is another key."""
    moved = [_key(f"{host}/me/vllm:1") for host in ("quay.io", "127.0.0.1:5000", "localhost")]
    assert len(set(moved)) == 1
    assert compile_config(_model({"image": "quay.io/me/vllm:1"}).spec)["image"] == "me/vllm:1"
    assert _key("quay.io/me/vllm:2") != moved[0]
    assert _key("quay.io/other/vllm:1") != moved[0]
    pinned_image = {_key(f"{host}/me/vllm:1@{DIGEST}") for host in ("quay.io", "mirror.io")}
    assert len(pinned_image) == 1 and pinned_image != {moved[0]}


@pytest.mark.parametrize(
    ("repository", "secrets", "says"),
    [
        ("quay.io/spyre-serving/runtime:1", (), "without a tag or digest"),
        ("Quay.io/Spyre", (), "not an image repository"),
        ("reg.example/ai runtime", (), "not an image repository"),
        ("reg.example/ai/runtime", ("Not_A_Name",), "not a Secret name"),
    ],
)
def test_wrong_settings_are_refused_with_what_to_give(
    repository: str, secrets: tuple[str, ...], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        RuntimeImages(repository, secrets)
    environ = {
        "SPYRE_OPERATOR_RUNTIME_IMAGE_REPOSITORY": repository,
        "SPYRE_OPERATOR_RUNTIME_IMAGE_PULL_SECRETS": ",".join(secrets),
    }
    with pytest.raises(SettingsError, match="--runtime-image-repository"):
        from_env(environ)


def test_the_operator_reads_its_flags() -> None:
    assert from_env({}).runtime_images == DEFAULT_IMAGES
    environ = {
        "SPYRE_OPERATOR_RUNTIME_IMAGE_REPOSITORY": MIRROR.repository,
        "SPYRE_OPERATOR_RUNTIME_IMAGE_PULL_SECRETS": "mirror-pull",
    }
    assert from_env(environ).runtime_images == MIRROR
    assert default_image("vllm-spyre", "1.10.0", "0.3.0", MIRROR.repository) == (
        "mirror.example.com:5000/ai/spyre-runtime:0.3.0-vllm-spyre-1.10.0"
    )


def test_run_refuses_a_wrong_repository_before_starting() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spyre_operator", "run", "--runtime-image-repository", "x:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "without a tag or digest" in done.stderr
