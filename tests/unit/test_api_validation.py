"""Every validation rule: a good and a bad case, and the message (path, rule, fix)."""

from __future__ import annotations

from typing import Any

import pytest
from apilib import BASE, EXAMPLES, load_example, merge, with_spec

from spyre_operator.api.problem import InvalidSpec
from spyre_operator.api.validation import parse, validate

pytestmark = pytest.mark.unit

VLLM_SPYRE = {"runtime": {"flavour": "vllm-spyre"}}
STATIC_DECODER = {
    **VLLM_SPYRE,
    "batching": {
        "continuous": None,
        "static": {"promptLens": [2048], "newTokens": [1024], "batchSizes": [16]},
    },
}
EMBED = {
    "model": {"id": "ibm-granite/granite-embedding-125m-english"},
    "task": "embed",
    "batching": {"continuous": None, "static": {"promptLens": [512], "batchSizes": [64]}},
}
PVC = {"model": {"path": "/models/granite", "source": {"pvc": {"claimName": "models"}}}}
NO_CHUNKED_PREFILL = {
    **VLLM_SPYRE,
    "batching": {"continuous": {"chunkedPrefill": False, "maxNumBatchedTokens": 8192}},
}
FP8 = {"model": {"id": "ibm-granite/granite-3.3-8b-instruct-FP8"}}
GPTQ = {"model": {"quantization": "gptq"}}
# FP8 weights on a volume whose path does not say so: the checkpoint type is declared.
COMPRESSED = {
    "model": {
        "path": "/models/granite",
        "quantization": "compressed-tensors",
        "source": {"pvc": {"claimName": "models"}},
    }
}
W4A16 = {"model": {"id": "acme/llm-8b-w4a16"}}

GOOD: dict[str, dict[str, Any]] = {
    "base": {},
    "pvc model with a path under the mount": PVC,
    "host path model": {
        "model": {
            "path": "/weights/m",
            "source": {"hostPath": {"path": "/srv/m", "mountPath": "/weights"}},
        }
    },
    "hub model with a token secret and revision": {
        "model": {"revision": "main", "source": {"hub": {"tokenSecret": {"name": "hf"}}}}
    },
    "hub model from a mirror at a tag": {
        "model": {"revision": "v1.0_rc+2", "source": {"hub": {"endpoint": "http://hub.local:8080"}}}
    },
    "hub model without an organisation, at a pull request": {
        "model": {"id": "gpt2", "revision": "refs/pr/1"}
    },
    "static decoders in vllm-spyre": STATIC_DECODER,
    "static shapes of equal length": merge(
        STATIC_DECODER,
        {
            "batching": {
                "static": {"promptLens": [64, 128], "newTokens": [2, 4], "batchSizes": [1, 2]}
            }
        },
    ),
    "pooling with static shapes": EMBED,
    "pooling without requiring precompiled graphs": merge(
        EMBED, {"cache": {"requirePrecompiled": False}}
    ),
    "vllm-spyre CB without chunked prefill, chunk >= maxModelLen": NO_CHUNKED_PREFILL,
    "prefix caching with chunked prefill": {"batching": {"continuous": {"prefixCaching": True}}},
    "FP8 with a batch of 2": merge(FP8, {"batching": {"continuous": {"maxNumSeqs": 2}}}),
    "GPTQ with a batch of 2": merge(GPTQ, {"batching": {"continuous": {"maxNumSeqs": 2}}}),
    "FP8 checkpoint declared as compressed-tensors": COMPRESSED,
    "unquantized with a batch of 1": {"batching": {"continuous": {"maxNumSeqs": 1}}},
    "unquantized compiled on CPU": {"cache": {"compile": {"backend": "sendnn_compile_only"}}},
    "TP 4 on 4 cards": {"tensorParallelSize": 4, "accelerator": {"count": 4}},
    "eager on CPU": {"backend": "eager"},
    "eager with cards": {"backend": "eager", "accelerator": {"count": 1}},
    "CPU stand-in for a TP 4 model": {"backend": "inductor", "accelerator": {"count": 4}},
    "rollout with a surge pod": {"rollout": {"maxSurge": 1, "maxUnavailable": 0}},
    "rollout in percent": {"rollout": {"maxSurge": "0%", "maxUnavailable": "50%"}},
    "CPU rollout without unavailable pods": {
        "backend": "eager",
        "rollout": {"maxUnavailable": 0},
    },
    "inductor on CPU": {"backend": "inductor"},
    "inductor with static batching in vllm-spyre": {
        **VLLM_SPYRE,
        "backend": "inductor",
        "model": {"id": "ibm-granite/granite-embedding-125m-english"},
        "task": "embed",
        "batching": {"continuous": None, "static": {"promptLens": [64], "batchSizes": [2]}},
    },
    "compile on CPU with sendnn-inference": {
        "cache": {"compile": {"backend": "sendnn_compile_only"}}
    },
    "matching flavour and version": {"runtime": {"flavour": "vllm-spyre", "version": "1.9.1"}},
    "env from a secret": {
        "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    },
    "unrelated flavour-prefixed env": {
        "env": [{"name": "SENDNN_INFERENCE_MAX_LOAD_PROCESSES", "value": "2"}]
    },
    "extra args the operator does not render": {"extraArgs": ["--trust-remote-code", "--seed=1"]},
    "cpu in millicores": {"resources": {"limits": {"cpu": "7500m", "memory": "64Gi"}}},
    "old accelerator resource name": {"accelerator": {"resourceName": "ibm.com/aiu_pf"}},
}

# (spec patch, path, a fragment of the message)
BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "no model id or path": ({"model": {"id": None}}, "spec.model", "set id"),
    "two model sources": (
        {"model": {"source": {"pvc": {"claimName": "m"}, "hub": {}}}},
        "spec.model.source",
        "exactly one of pvc, hostPath, hub (got pvc, hub)",
    ),
    "hub model with a path": ({"model": {"path": "/models/x"}}, "spec.model.path", "remove path"),
    "pvc model without a path": (
        {"model": {"source": {"pvc": {"claimName": "m"}}}},
        "spec.model.path",
        "required with a pvc source: the model directory, e.g. /models/<model>",
    ),
    "pvc model outside the mount": (
        merge(PVC, {"model": {"path": "/data/granite"}}),
        "spec.model.path",
        "must be inside the source's mountPath /models",
    ),
    "hub id that is a path": (
        {"model": {"id": "../../etc"}},
        "spec.model.id",
        "is not a Hugging Face model id: use org/name",
    ),
    "hub id that is a vLLM flag": (
        {"model": {"id": "--help"}},
        "spec.model.id",
        "is not a Hugging Face model id",
    ),
    "hub id with a trailing newline": (
        {"model": {"id": "org/name\n"}},
        "spec.model.id",
        "is not a Hugging Face model id",
    ),
    "hub revision that is a flag": (
        {"model": {"revision": "--no-such-flag"}},
        "spec.model.revision",
        "is not a branch, tag or commit name",
    ),
    "hub revision climbing out": (
        {"model": {"revision": "a/../../b"}},
        "spec.model.revision",
        "is not a branch, tag or commit name",
    ),
    "hub endpoint that is not a URL": (
        {"model": {"source": {"hub": {"endpoint": "hub.local"}}}},
        "spec.model.source.hub.endpoint",
        "",
    ),
    "revision of a pvc model": (
        merge(PVC, {"model": {"revision": "main"}}),
        "spec.model.revision",
        "only applies to hub downloads",
    ),
    "model mounted over the cache": (
        merge(PVC, {"model": {"path": "/tmp/m", "source": {"pvc": {"mountPath": "/tmp"}}}}),
        "spec.model.source.pvc.mountPath",
        "choose another directory",
    ),
    "no batching mode": ({"batching": {"continuous": None}}, "spec.batching", "exactly one of"),
    "pooling with continuous batching": (
        {"task": "embed"},
        "spec.batching.continuous",
        "pooling models (task embed) run on static warmup shapes",
    ),
    "static decoders in sendnn-inference": (
        merge(STATIC_DECODER, {"runtime": None}),
        "spec.batching.static",
        "sendnn-inference has no static batching for decoders",
    ),
    "warmup lists of different lengths": (
        merge(STATIC_DECODER, {"batching": {"static": {"promptLens": [64, 128]}}}),
        "spec.batching.static",
        "same length (one entry per shape): promptLens has 2, batchSizes has 1, newTokens has 1",
    ),
    "static decoder without newTokens": (
        merge(STATIC_DECODER, {"batching": {"static": {"newTokens": None}}}),
        "spec.batching.static.newTokens",
        "required for static decoder batching",
    ),
    "pooling with newTokens": (
        merge(EMBED, {"batching": {"static": {"newTokens": [2]}}}),
        "spec.batching.static.newTokens",
        "pooling models generate no tokens",
    ),
    "one new token": (
        merge(STATIC_DECODER, {"batching": {"static": {"newTokens": [1]}}}),
        "spec.batching.static.newTokens[0]",
        "must be at least 2, got 1 (Spyre decoders need at least 2 new tokens per shape)",
    ),
    "prompt length off the block size": (
        merge(EMBED, {"batching": {"static": {"promptLens": [100]}}}),
        "spec.batching.static.promptLens[0]",
        "must be a multiple of 64, got 100: use 64 or 128",
    ),
    "chunk size off the block size": (
        {"batching": {"continuous": {"maxNumBatchedTokens": 1000}}},
        "spec.batching.continuous.maxNumBatchedTokens",
        "must be a multiple of 64, got 1000: use 960 or 1024 (the prefill chunk is a multiple "
        "of Spyre's KV block size (64); 1024-4096 is recommended)",
    ),
    "context above 32K": (
        {"batching": {"continuous": {"maxModelLen": 65536}}},
        "spec.batching.continuous.maxModelLen",
        "must be at most 32768, got 65536",
    ),
    "no chunked prefill and a chunk below maxModelLen": (
        merge(NO_CHUNKED_PREFILL, {"batching": {"continuous": {"maxNumBatchedTokens": 1024}}}),
        "spec.batching.continuous.maxNumBatchedTokens",
        "must be at least maxModelLen (8192): set it to 8192, or set chunkedPrefill: true",
    ),
    "chunked prefill off in sendnn-inference": (
        {"batching": {"continuous": {"chunkedPrefill": False}}},
        "spec.batching.continuous.chunkedPrefill",
        "sendnn-inference always prefills in chunks",
    ),
    "prefix caching without chunked prefill": (
        merge(NO_CHUNKED_PREFILL, {"batching": {"continuous": {"prefixCaching": True}}}),
        "spec.batching.continuous.prefixCaching",
        "prefix caching needs chunked prefill in vllm-spyre",
    ),
    "FP8 with a batch of 1": (
        merge(FP8, {"batching": {"continuous": {"maxNumSeqs": 1}}}),
        "spec.batching.continuous.maxNumSeqs",
        "quantized models (ibm-granite/granite-3.3-8b-instruct-FP8 names a quantized "
        "checkpoint) do not support batch size 1",
    ),
    "GPTQ with a batch of 1": (
        merge(GPTQ, {"batching": {"continuous": {"maxNumSeqs": 1}}}),
        "spec.batching.continuous.maxNumSeqs",
        "quantized models (quantization gptq) do not support batch size 1",
    ),
    "compressed-tensors with a batch of 1": (
        merge(COMPRESSED, {"batching": {"continuous": {"maxNumSeqs": 1}}}),
        "spec.batching.continuous.maxNumSeqs",
        "quantized models (quantization compressed-tensors) do not support batch size 1",
    ),
    "a wNaM checkpoint with a batch of 1": (
        merge(W4A16, {"batching": {"continuous": {"maxNumSeqs": 1}}}),
        "spec.batching.continuous.maxNumSeqs",
        "acme/llm-8b-w4a16 names a quantized checkpoint",
    ),
    "fp8 as a quantization method": (
        {"model": {"quantization": "fp8"}},
        "spec.model.quantization",
        "must be one of 'gptq' or 'compressed-tensors', got 'fp8' (vLLM-Spyre accepts gptq "
        "and compressed-tensors; FP8 checkpoints are compressed-tensors",
    ),
    "TP 3": (
        {"tensorParallelSize": 3},
        "spec.tensorParallelSize",
        "must be one of 1, 2 or 4, got 3",
    ),
    "cards unequal to TP": (
        {"tensorParallelSize": 2, "accelerator": {"count": 1}},
        "spec.accelerator.count",
        "must equal tensorParallelSize (2)",
    ),
    "a rollout that can replace no pod": (
        {"rollout": {"maxSurge": 0, "maxUnavailable": "0%"}},
        "spec.rollout",
        "maxSurge and maxUnavailable cannot both be 0",
    ),
    "a card rollout with no pod down and the default surge": (
        {"rollout": {"maxUnavailable": 0}},
        "spec.rollout.maxUnavailable",
        "0 with maxSurge 0 (the default when the pods hold cards",
    ),
    "more unavailable than all replicas": (
        {"rollout": {"maxUnavailable": "150%"}},
        "spec.rollout.maxUnavailable",
        "150% is more than all the replicas: use at most 100%",
    ),
    "a surge as a string count": (
        {"rollout": {"maxSurge": "1"}},
        "spec.rollout.maxSurge",
        "must be a number of pods (0 to 100000) or a percent of the replicas such as 25%, got '1'",
    ),
    "a negative surge": (
        {"rollout": {"maxSurge": -1}},
        "spec.rollout.maxSurge",
        "must be a number of pods",
    ),
    "compile backend for eager": (
        {"backend": "eager", "cache": {"compile": {"backend": "sendnn"}}},
        "spec.cache.compile.backend",
        "the eager backend compiles nothing",
    ),
    "inductor with continuous batching in vllm-spyre": (
        {**VLLM_SPYRE, "backend": "inductor"},
        "spec.backend",
        "vllm-spyre cannot compile continuous batching with inductor (it passes the "
        "Spyre-only torch.compile option sendnn.dynamic",
    ),
    "compile backend for inductor": (
        {"backend": "inductor", "cache": {"compile": {"backend": "sendnn_compile_only"}}},
        "spec.cache.compile.backend",
        "its compile Job warms up with inductor too",
    ),
    "inductor cache dir in env": (
        {"env": [{"name": "TORCHINDUCTOR_CACHE_DIR", "value": "/tmp/x"}]},
        "spec.env[0].name",
        "TORCHINDUCTOR_CACHE_DIR is set by the operator: it is inductor's cache",
    ),
    "compile on CPU in vllm-spyre": (
        {**VLLM_SPYRE, "cache": {"compile": {"backend": "sendnn_compile_only"}}},
        "spec.cache.compile.backend",
        "vllm-spyre has no sendnn_compile_only backend",
    ),
    "compile FP8 on CPU": (
        merge(FP8, {"cache": {"compile": {"backend": "sendnn_compile_only"}}}),
        "spec.cache.compile.backend",
        "sendnn_compile_only cannot compile quantized models",
    ),
    "compile GPTQ on CPU": (
        merge(GPTQ, {"cache": {"compile": {"backend": "sendnn_compile_only"}}}),
        "spec.cache.compile.backend",
        "cannot compile quantized models (quantization gptq)",
    ),
    "pooling requiring precompiled graphs": (
        merge(EMBED, {"cache": {"requirePrecompiled": True}}),
        "spec.cache.requirePrecompiled",
        "only decoders can require precompiled graphs",
    ),
    "version of the other flavour": (
        {"runtime": {"version": "1.10.0"}},
        "spec.runtime.version",
        "sendnn-inference versions are 2.x, got 1.10.0",
    ),
    "env set twice": (
        {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        "spec.env[1].name",
        "A is set twice",
    ),
    "env the operator renders": (
        {"env": [{"name": "SENDNN_INFERENCE_DYNAMO_BACKEND", "value": "eager"}]},
        "spec.env[0].name",
        "is set by the operator or by vLLM-Spyre from spec fields",
    ),
    "env shaping the graphs": (
        {"env": [{"name": "VLLM_DT_MAX_CONTEXT_LEN", "value": "1"}]},
        "spec.env[0].name",
        "may change the compiled graphs",
    ),
    "env replacing the known-config registry": (
        {"env": [{"name": "SENDNN_INFERENCE_MODEL_CONFIG_FILE", "value": "/etc/r.yaml"}]},
        "spec.env[0].name",
        "replaces vLLM-Spyre's known-config registry",
    ),
    "env replacing the registry of vllm-spyre": (
        {**VLLM_SPYRE, "env": [{"name": "VLLM_SPYRE_MODEL_CONFIG_FILE", "value": "/r.yaml"}]},
        "spec.env[0].name",
        "the file's content cannot be part of the cache key",
    ),
    "env with value and valueFrom": (
        {
            "env": [
                {
                    "name": "A",
                    "value": "1",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                }
            ]
        },
        "spec.env[0]",
        "set value or valueFrom, not both",
    ),
    "env with an empty valueFrom": (
        {"env": [{"name": "A", "valueFrom": {}}]},
        "spec.env[0].valueFrom",
        "exactly one of secretKeyRef, configMapKeyRef, fieldRef",
    ),
    "extra arg the operator renders": (
        {"extraArgs": ["--trust-remote-code", "--max-model-len=4096"]},
        "spec.extraArgs[1]",
        "'--max-model-len=...' sets --max-model-len, which the operator renders: set "
        "spec.batching.continuous.maxModelLen instead",
    ),
    "cards in resources": (
        {"resources": {"limits": {"ibm.com/spyre_pf": 1}}},
        'spec.resources.limits["ibm.com/spyre_pf"]',
        "Spyre cards are requested with spec.accelerator",
    ),
    "cpu in an odd unit": (
        {"cache": {"compile": {"resources": {"limits": {"cpu": "2k"}}}}},
        "spec.cache.compile.resources.limits.cpu",
        "use cores (8) or millicores (7500m), got 2k",
    ),
    "not a quantity": (
        {"resources": {"requests": {"memory": "lots"}}},
        "spec.resources.requests.memory",
        "must be a Kubernetes quantity such as 8, 7500m or 64Gi, got 'lots'",
    ),
    "typo in a field name": (
        {"batching": {"continuous": {"maxNumSeq": 4}}},
        "spec.batching.continuous.maxNumSeq",
        "unknown field: did you mean maxNumSeqs?",
    ),
    "missing required field": (
        {"batching": {"continuous": {"maxModelLen": None}}},
        "spec.batching.continuous.maxModelLen",
        "required field is missing",
    ),
    "unknown task": ({"task": "chat"}, "spec.task", "must be one of 'generate', 'embed'"),
    "port 0": ({"service": {"port": 0}}, "spec.service.port", "must be at least 1, got 0"),
    "negative replicas": ({"replicas": -1}, "spec.replicas", "must be at least 0, got -1"),
    "not a Spyre resource": (
        {"accelerator": {"resourceName": "nvidia.com/gpu"}},
        "spec.accelerator.resourceName",
        "must match",
    ),
    "wrong type": (
        {"replicas": "two"},
        "spec.replicas",
        "must be an integer, got 'two'",
    ),
}


@pytest.mark.parametrize("patch", GOOD.values(), ids=GOOD.keys())
def test_good_specs_have_no_problems(patch: dict[str, Any]) -> None:
    assert validate(with_spec(patch)) == []


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_are_valid(example: Any) -> None:
    assert validate(load_example(example)) == []


@pytest.mark.parametrize(("patch", "path", "fragment"), BAD.values(), ids=BAD.keys())
def test_bad_specs_name_the_field_the_rule_and_the_fix(
    patch: dict[str, Any], path: str, fragment: str
) -> None:
    problems = validate(with_spec(patch))
    assert [p.path for p in problems] == [path], problems
    assert fragment in problems[0].message


def test_all_field_problems_are_reported_at_once() -> None:
    spec = {"tensorParallelSize": 3, "replicas": -1, "service": {"port": 70000}}
    paths = {p.path for p in validate(with_spec(spec))}
    assert paths == {"spec.tensorParallelSize", "spec.replicas", "spec.service.port"}


def test_all_cross_field_problems_are_reported_at_once() -> None:
    spec = {"model": {"id": None}, "accelerator": {"count": 2}, "extraArgs": ["--port=1"]}
    paths = {p.path for p in validate(with_spec(spec))}
    assert paths == {"spec.model", "spec.accelerator.count", "spec.extraArgs[0]"}


@pytest.mark.parametrize(
    ("obj", "path", "fragment"),
    [
        ([1, 2], "", "expected a SpyreModel object (a mapping), got a list"),
        (merge(BASE, {"kind": "Deployment"}), "kind", "got serving.spyre.dev/v1alpha1/Deployment"),
        (merge(BASE, {"metadata": {"name": "Granite.8b"}}), "metadata.name", "DNS-1035 label"),
        (merge(BASE, {"spec": None}), "spec", "required field is missing"),
        (merge(BASE, {"spec": "x"}), "spec", "must be a mapping of fields, got 'x'"),
    ],
    ids=["not a mapping", "wrong kind", "bad name", "no spec", "spec not a mapping"],
)
def test_object_level_problems(obj: Any, path: str, fragment: str) -> None:
    problems = validate(obj)
    assert [p.path for p in problems] == [path]
    assert fragment in str(problems[0])


def test_parse_returns_the_typed_model_with_defaults() -> None:
    model = parse(merge(BASE, {"metadata": {"namespace": None, "uid": "u-1"}}), "fallback")
    assert (model.name, model.namespace, model.uid) == ("demo", "fallback", "u-1")
    spec = model.spec
    assert spec.runtime.flavour == "sendnn-inference"
    assert spec.runtime_version == "2.6.3"
    assert spec.batching.continuous is not None
    assert spec.batching.continuous.max_num_batched_tokens == 1024
    assert spec.accelerator_count == 1
    assert spec.require_precompiled is True
    assert spec.model.source.hub is not None
    assert spec.image_ref() == "quay.io/spyre-serving/runtime:0.1.0-sendnn-inference-2.6.3"


def test_parse_raises_with_every_problem() -> None:
    with pytest.raises(InvalidSpec) as raised:
        parse(with_spec({"tensorParallelSize": 3, "replicas": -1}))
    assert len(raised.value.problems) == 2
    assert "spec.tensorParallelSize: must be one of 1, 2 or 4" in str(raised.value)


def test_spec_round_trips_in_camel_case() -> None:
    spec = parse(load_example(EXAMPLES[0])).spec
    assert parse(merge(BASE, {"spec": spec.to_k8s()})).spec == spec
    assert "maxNumBatchedTokens" in spec.to_k8s()["batching"]["continuous"]
