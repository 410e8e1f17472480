"""Validate and parse SpyreModel objects: the CLI, the admission webhook and the operator
share these messages.

Field-level errors come from pydantic (translated into `spec.a.b: message` lines with the
fix); rules across fields run once the fields are valid (api/rules.py).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from spyre_operator.api import rules
from spyre_operator.api.known_configs import known_config_warning
from spyre_operator.api.names import API_VERSION, KIND
from spyre_operator.api.problem import InvalidSpec, Problem, join_path
from spyre_operator.api.spec import SpyreModelSpec

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

# A DNS-1123 subdomain, as Kubernetes checks the names of the objects these fields name.
_SUBDOMAIN_HINT = (
    "a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending "
    "with a letter or digit"
)
# Why a field has its bounds, appended to schema-level messages (paths without indices).
HINTS = {
    "spec.imagePullSecrets.name": _SUBDOMAIN_HINT,
    "spec.serviceAccountName": _SUBDOMAIN_HINT,
    "spec.priorityClassName": _SUBDOMAIN_HINT,
    "spec.service.apiKeySecret.name": _SUBDOMAIN_HINT,
    "spec.service.apiKeySecret.key": (
        "a key of a Secret's data: letters, digits, '-', '_' and '.'"
    ),
    "spec.service.allowFrom": (
        "unset admits this namespace's pods; [{namespaceSelector: {}}] every namespace's"
    ),
    "spec.batching.continuous.maxNumBatchedTokens": (
        "the prefill chunk is a multiple of Spyre's KV block size (64); 1024-4096 is recommended"
    ),
    "spec.batching.continuous.maxModelLen": (
        "continuous batching on Spyre supports prompt + output up to 32768 tokens"
    ),
    "spec.batching.static.promptLens": "prompts are padded to Spyre's KV block size (64)",
    "spec.batching.static.newTokens": "Spyre decoders need at least 2 new tokens per shape",
    "spec.tensorParallelSize": "vLLM-Spyre runs tensor parallel on 1, 2 or 4 cards",
    "spec.model.quantization": (
        "vLLM-Spyre accepts gptq and compressed-tensors; FP8 checkpoints are "
        "compressed-tensors; unset lets vLLM read it from the model config"
    ),
}


@dataclass(frozen=True)
class SpyreModel:
    """A parsed, valid SpyreModel: what the renderers and the operator work from."""

    name: str
    namespace: str
    spec: SpyreModelSpec
    uid: str | None = None


def validate(obj: object) -> list[Problem]:
    """Every problem of a SpyreModel object (a dict as read from YAML or the API)."""
    return _check(obj)[1]


def parse(obj: object, default_namespace: str = "default") -> SpyreModel:
    """The parsed SpyreModel; raises InvalidSpec with every problem if it is not valid."""
    spec, problems = _check(obj)
    if problems or spec is None:
        raise InvalidSpec(problems)
    assert isinstance(obj, Mapping)
    meta = obj["metadata"]
    return SpyreModel(
        name=meta["name"],
        namespace=meta.get("namespace") or default_namespace,
        spec=spec,
        uid=meta.get("uid"),
    )


@dataclass(frozen=True)
class Review:
    """What `spyre-operator validate` and the admission webhook say about one object: the
    parsed model, or every problem; a known-config warning does not make it invalid."""

    model: SpyreModel | None
    problems: list[Problem]
    warning: str | None = None


def review(
    obj: object, default_namespace: str = "default", model_config: Mapping[str, Any] | None = None
) -> Review:
    """Every problem of a SpyreModel object, or the model and its known-config warning
    (`model_config`: the model's config.json, to find its entry by architecture)."""
    try:
        model = parse(obj, default_namespace)
    except InvalidSpec as invalid:
        return Review(None, invalid.problems)
    return Review(model, [], known_config_warning(model.spec, model_config))


def validate_spec(spec: object) -> tuple[SpyreModelSpec | None, list[Problem]]:
    """Parse a bare `spec` mapping; the problems' paths start with `spec.`."""
    try:
        parsed = SpyreModelSpec.model_validate(spec)
    except ValidationError as err:
        return None, [_translate(e) for e in err.errors(include_url=False)]
    return parsed, rules.check(parsed)


def _check(obj: object) -> tuple[SpyreModelSpec | None, list[Problem]]:
    if not isinstance(obj, Mapping):
        return None, [Problem("", f"expected a {KIND} object (a mapping), got {_kind_of(obj)}")]
    problems = []
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != KIND:
        got = f"{obj.get('apiVersion')}/{obj.get('kind')}"
        problems.append(
            Problem("kind", f"expected apiVersion {API_VERSION} kind {KIND}, got {got}")
        )
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not DNS_1035.match(name) or len(name) > 63:
        problems.append(
            Problem(
                "metadata.name",
                "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
                "letter, at most 63 characters) because it names the Deployment and the "
                f"Service, got {name!r}",
            )
        )
    if "spec" not in obj:
        return None, [*problems, Problem("spec", "required field is missing")]
    spec, spec_problems = validate_spec(obj["spec"])
    return spec, problems + spec_problems


def _kind_of(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


def _translate(err: ErrorDetails) -> Problem:
    path = join_path("spec", *err["loc"])
    ctx, value, kind = err.get("ctx", {}), err.get("input"), err["type"]
    if kind == "missing":
        message = "required field is missing"
    elif kind == "extra_forbidden":
        name = str(err["loc"][-1])
        guess = difflib.get_close_matches(name, sorted(_known_fields()), n=1)
        message = "unknown field" + (f": did you mean {guess[0]}?" if guess else "")
    elif kind == "multiple_of":
        step = ctx["multiple_of"]
        low = value // step * step
        fix = f"{low} or {low + step}" if low else str(step)
        message = f"must be a multiple of {step}, got {value}: use {fix}"
    elif kind in ("greater_than_equal", "less_than_equal"):
        bound, word = (ctx["ge"], "least") if kind == "greater_than_equal" else (ctx["le"], "most")
        message = f"must be at {word} {bound}, got {value}"
    elif kind == "literal_error":
        message = f"must be one of {ctx['expected']}, got {value!r}"
    elif kind == "string_pattern_mismatch":
        message = f"must match {ctx['pattern']}, got {value!r}"
    elif kind in ("too_short", "too_long"):
        message = err["msg"].replace("List", "the list").replace("Value", "the list")
    elif kind == "quantity":
        message = err["msg"]
    elif kind == "string_type" and isinstance(value, bool | int | float):
        # e.g. `sidecar.istio.io/inject: true` in YAML
        shown = str(value).lower() if isinstance(value, bool) else value
        message = f'must be a string, got {value!r}: quote it in YAML ("{shown}")'
    else:
        message = f"{err['msg'].replace('Input should be', 'must be')}, got {value!r}"
    hint = HINTS.get(re.sub(r"\[[^]]*\]", "", path))
    return Problem(path, f"{message} ({hint})" if hint else message)


def _known_fields() -> set[str]:
    """Every camelCase field name of the spec, for "did you mean" suggestions."""
    return {
        str(info.alias) for model in _models(SpyreModelSpec) for info in model.model_fields.values()
    }


def _models(model: type[BaseModel], seen: set[type] | None = None) -> Iterator[type[BaseModel]]:
    seen = seen if seen is not None else set()
    if model in seen:
        return
    seen.add(model)
    yield model
    for info in model.model_fields.values():
        for inner in _types_in(info.annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                yield from _models(inner, seen)


def _types_in(annotation: Any) -> Iterator[Any]:
    yield annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            yield from _types_in(arg)


__all__ = ["InvalidSpec", "Problem", "Review", "SpyreModel", "parse", "review", "validate"]
