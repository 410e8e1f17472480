"""The cacheKey changes exactly when the compiled graphs may change."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from apilib import ROOT, example, merge

from spyre_operator.api.runtimes import RuntimeImages, default_image
from spyre_operator.api.validation import parse
from spyre_operator.render.cachekey import cache_key, canonical_json, compile_config, short_key

pytestmark = pytest.mark.unit

GRANITE = example("granite-3.3-8b-instruct")
DEFAULT_IMAGE = "quay.io/spyre-serving/runtime:0.1.0-sendnn-inference-2.6.3"
ON_PVC = {"hub": None, "pvc": {"claimName": "weights"}}
ON_HOST = {"hub": None, "hostPath": {"path": "/srv/m"}}
PVC = {"model": {"id": None, "path": "/models/m", "source": ON_PVC}}
HOST = {"model": {"id": None, "path": "/models/m", "source": ON_HOST}}


def _key(patch: dict[str, Any]) -> str:
    return cache_key(parse(merge(GRANITE, {"spec": patch})).spec)


def test_key_is_sha256_of_the_canonical_config() -> None:
    spec = parse(GRANITE).spec
    key = cache_key(spec)
    assert len(key) == 64 and int(key, 16) >= 0
    assert short_key(key) == key[:12]
    text = canonical_json(compile_config(spec))
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_key_is_stable_in_a_new_process() -> None:
    code = (
        "import sys, yaml\n"
        "from spyre_operator.api.validation import parse\n"
        "from spyre_operator.render.cachekey import cache_key\n"
        "doc = yaml.safe_load(open(sys.argv[1]))\n"
        "print(cache_key(parse(doc).spec))\n"
    )
    path = ROOT / "examples" / "granite-3.3-8b-instruct.yaml"
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True, text=True, check=True, timeout=60,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )  # fmt: skip
    assert done.stdout.strip() == cache_key(parse(GRANITE).spec)


KEEPS_KEY = {
    "replicas": {"replicas": 3},
    "resources": {"resources": {"limits": {"cpu": "64", "memory": "512Gi"}}},
    "logging env": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]},
    "plugin load pacing env": {
        "env": [{"name": "SENDNN_INFERENCE_MAX_LOAD_PROCESSES", "value": "2"}]
    },
    "proxy env from a secret": {
        "env": [{"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "p", "key": "u"}}}]
    },
    "logging args": {"extraArgs": ["--disable-log-requests"]},
    "front-end args with values": {
        "extraArgs": ["--tool-call-parser", "granite", "--enable-auto-tool-choice", "--host=::"]
    },
    "service": {"service": {"type": "LoadBalancer", "port": 80}},
    "who may connect, and an API key": {
        "service": {
            "allowFrom": [{"ipBlock": {"cidr": "0.0.0.0/0"}}],
            "apiKeySecret": {"name": "other-key", "key": "k"},
        }
    },
    "served name": {"model": {"servedName": "granite"}},
    "prefix caching": {"batching": {"continuous": {"prefixCaching": False}}},
    "require precompiled": {"cache": {"requirePrecompiled": False}},
    "compile on cards instead of CPU": {"cache": {"compile": {"backend": "sendnn"}}},
    "compile resources and deadline": {"cache": {"compile": {"activeDeadlineSeconds": 600}}},
    "cache volume": {"cache": {"volume": {"size": "1Ti"}}},
    "scheduling": {"schedulerName": "other", "nodeSelector": {"a": "b"}},
    "token secret": {"model": {"source": {"hub": {"tokenSecret": {"name": "other"}}}}},
    "default version written out": {"runtime": {"version": "2.6.3"}},
}

CHANGES_KEY = {
    "chunk size": {"batching": {"continuous": {"maxNumBatchedTokens": 2048}}},
    "max model len": {"batching": {"continuous": {"maxModelLen": 16384}}},
    "max num seqs": {"batching": {"continuous": {"maxNumSeqs": 16}}},
    "tkv limit": {"batching": {"continuous": {"maxBatchTkvLimit": 131072}}},
    "kv blocks": {"batching": {"continuous": {"numGpuBlocksOverride": 8192}}},
    "tensor parallel": {"tensorParallelSize": 2},
    "model": {"model": {"id": "ibm-granite/granite-4-8b-dense"}},
    "revision": {"model": {"revision": "v1"}},
    "quantization": {"model": {"quantization": "gptq"}, "cache": {"compile": {"backend": None}}},
    "image": {"image": "registry.example/runtime:1"},
    "image digest": {"image": f"{DEFAULT_IMAGE}@sha256:{'a' * 64}"},
    "graph-shaping env": {"env": [{"name": "DT_OPT", "value": "varsub=1"}]},
    "plugin env off the neutral list": {
        "env": [{"name": "SENDNN_INFERENCE_UPDATE_THREAD_CONFIG", "value": "0"}]
    },
    "env from a ConfigMap": {
        "env": [{"name": "DT_OPT", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    },
    "graph-shaping args": {"extraArgs": ["--hf-overrides", '{"num_hidden_layers": 2}']},
    "graph-shaping args after neutral ones": {
        "extraArgs": ["--disable-log-requests", "--hf-overrides={}"]
    },
    "runtime version": {"runtime": {"version": "2.5.2"}},
    "flavour": {
        "runtime": {"flavour": "vllm-spyre"},
        "cache": {"compile": {"backend": None}},
    },
    "backend": {"backend": "eager", "cache": {"compile": None}},
    "inductor backend": {"backend": "inductor", "cache": {"compile": None}},
}


def test_eager_and_inductor_have_their_own_keys() -> None:
    """Each CPU backend fills (or, eager, leaves empty) its own key directory."""
    eager, inductor = (
        _key({"backend": b, "cache": {"compile": None}}) for b in ("eager", "inductor")
    )
    assert eager != inductor


@pytest.mark.parametrize("patch", KEEPS_KEY.values(), ids=KEEPS_KEY.keys())
def test_changes_that_keep_the_key(patch: dict[str, Any]) -> None:
    assert _key(patch) == _key({})


@pytest.mark.parametrize("patch", CHANGES_KEY.values(), ids=CHANGES_KEY.keys())
def test_changes_that_change_the_key(patch: dict[str, Any]) -> None:
    assert _key(patch) != _key({})


def test_static_shapes_are_in_the_key() -> None:
    obj = example("granite-embedding-125m-english")
    base = cache_key(parse(obj).spec)
    other = merge(obj, {"spec": {"batching": {"static": {"batchSizes": [32]}}}})
    assert cache_key(parse(other).spec) != base
    config = compile_config(parse(obj).spec)
    assert config["batching"] == {"mode": "static", "promptLens": [512], "batchSizes": [64]}
    assert config["runner"] == "pooling"


def test_same_values_in_another_order_keep_the_key() -> None:
    a, b = {"name": "A", "value": "1"}, {"name": "B", "value": "2"}
    assert _key({"env": [a, b]}) == _key({"env": [b, a]})
    assert _key({"extraArgs": ["--seed", "1", "--x"]}) != _key(
        {"extraArgs": ["--x", "--seed", "1"]}
    )


MODEL_VOLUMES = {
    "another claim": merge(PVC, {"model": {"source": {"pvc": {"claimName": "other"}}}}),
    "a sub path of the claim": merge(PVC, {"model": {"source": {"pvc": {"subPath": "v2"}}}}),
    "a host path": HOST,
    "another host path": merge(HOST, {"model": {"source": {"hostPath": {"path": "/srv/n"}}}}),
}


def test_the_model_volume_is_in_the_key() -> None:
    """The same path in the container, different weights: each volume has its own key."""
    keys = [_key(PVC)] + [_key(patch) for patch in MODEL_VOLUMES.values()]
    assert len(set(keys)) == len(keys)
    assert compile_config(
        parse(merge(GRANITE, {"spec": MODEL_VOLUMES["a sub path of the claim"]})).spec
    )["modelVolume"] == {"pvc": {"claimName": "weights", "subPath": "v2"}}


def test_the_model_mount_point_alone_is_not_the_identity() -> None:
    moved = merge(PVC, {"model": {"path": "/w/m", "source": {"pvc": {"mountPath": "/w"}}}})
    assert _key(moved) != _key(PVC)  # the model argument (a path) changed with it
    config = compile_config(parse(merge(GRANITE, {"spec": moved})).spec)
    assert config["modelVolume"] == {"pvc": {"claimName": "weights"}}


def test_an_operator_upgrade_keeps_the_key() -> None:
    """The default image carries the operator version (so the entrypoint follows the
    operator); its base image is named by runtime.flavour/version, which are in the key."""
    old, new = (
        default_image("sendnn-inference", "2.6.3", operator_version=v) for v in ("0.1.0", "0.2.0")
    )
    assert old != new
    assert _key({}) == _key({"image": old}) == _key({"image": new})
    assert "image" not in compile_config(parse(GRANITE).spec)
    # another plugin version is another base image
    other = default_image("sendnn-inference", "2.5.2", operator_version="0.2.0")
    assert _key({"image": other, "runtime": {"version": "2.5.2"}}) != _key({})


def test_the_operators_image_moved_to_another_registry_host_keeps_the_key() -> None:
    """The node's registry moved from loopback to the node's address (issue 33): its
    images' references changed host and port, no key did (issue 29: moving registries
    recompiles nothing)."""
    moved = [
        RuntimeImages(f"{host}/spyre-serving/runtime").image("sendnn-inference", "2.6.3")
        for host in ("127.0.0.1:41234", "10.234.0.1:46829", "quay.io")
    ]
    assert len(set(moved)) == 3
    assert {_key({"image": image}) for image in moved} == {_key({})}


def test_an_image_digest_is_keyed_by_the_digest_alone() -> None:
    digest = f"sha256:{'b' * 64}"
    mirrored = _key({"image": f"mirror.example/spyre/runtime@{digest}"})
    assert mirrored == _key({"image": f"{DEFAULT_IMAGE}@{digest}"})
    assert mirrored != _key({"image": f"{DEFAULT_IMAGE}@sha256:{'c' * 64}"})
    spec = parse(merge(GRANITE, {"spec": {"image": f"{DEFAULT_IMAGE}@{digest}"}})).spec
    assert compile_config(spec)["image"] == digest


def test_only_graph_shaping_env_and_args_are_recorded() -> None:
    patch = {
        "env": [
            {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
            {"name": "DT_OPT", "value": "varsub=1"},
        ],
        "extraArgs": ["--root-path", "/llm", "--hf-overrides", "{}"],
    }
    config = compile_config(parse(merge(GRANITE, {"spec": patch})).spec)
    assert config["env"] == [{"name": "DT_OPT", "value": "varsub=1"}]
    assert config["extraArgs"] == ["--hf-overrides", "{}"]
