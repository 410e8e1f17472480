"""The cacheKey changes exactly when the compiled graphs may change."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from apilib import ROOT, example, merge

from spyre_operator.api.validation import parse
from spyre_operator.render.cachekey import cache_key, canonical_json, compile_config, short_key

pytestmark = pytest.mark.unit

GRANITE = example("granite-3.3-8b-instruct")


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
    "extra env": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]},
    "extra args": {"extraArgs": ["--disable-log-requests"]},
    "service": {"service": {"type": "LoadBalancer", "port": 80}},
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
    "runtime version": {"runtime": {"version": "2.5.2"}},
    "flavour": {
        "runtime": {"flavour": "vllm-spyre"},
        "cache": {"compile": {"backend": None}},
    },
    "backend": {"backend": "eager", "cache": {"compile": None}},
}


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
