"""Validate and parse SpyreModel objects: the CLI, the admission webhook and the operator
share these messages.

Field-level errors come from pydantic (translated into `spec.a.b: message` lines with the
fix); rules across fields run once the fields are valid (api/rules.py).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from spyre_operator.api import image_rules, rules, runtimes
from spyre_operator.api.document import (
    field_problems,
    metadata_problems,
    nul_problems,
    unknown_field,
)
from spyre_operator.api.known_configs import known_config_warning
from spyre_operator.api.names import API_VERSION, CACHE_KIND, KIND
from spyre_operator.api.problem import InvalidSpec, Problem, clip, join_path, shown
from spyre_operator.api.spec import SpyreModelSpec

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Most problems one object reports, and the longest field path quoted: bounded output.
MAX_PROBLEMS = 50
MAX_PATH = 300

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
    "spec.cache.volume.claimName": _SUBDOMAIN_HINT,
    "spec.cache.volume.storageClassName": _SUBDOMAIN_HINT,
    "spec.model.source.pvc.claimName": _SUBDOMAIN_HINT,
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
    kind: str = KIND  # or CACHE_KIND: a SpyreCache, which only compiles

    @property
    def serves(self) -> bool:
        return self.kind == KIND


def validate(
    obj: object, images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES
) -> list[Problem]:
    """Every problem of a SpyreModel object (a dict as read from YAML or the API)."""
    return _check(obj, images=images)[1]


def parse(
    obj: object,
    default_namespace: str = "default",
    kind: str = KIND,
    *,
    from_file: bool = False,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
) -> SpyreModel:
    """The parsed SpyreModel (or SpyreCache: the same spec, the compile of which is all
    that counts); raises InvalidSpec with every problem if it is not valid. `from_file`: a
    document as written, whose top-level keys and metadata fields are checked too; what
    the webhook and the operator read, the API server has decoded (an unknown field there
    is a newer Kubernetes' own). `images`: the operator's serving images, which decide
    whether a model may leave spec.image out (the operator's --runtime-image-* settings)."""
    spec, problems = _check(obj, kind, from_file, images)
    if problems or spec is None:
        raise InvalidSpec(problems)
    assert isinstance(obj, Mapping)
    meta = obj["metadata"]
    return SpyreModel(
        name=meta["name"],
        namespace=meta.get("namespace") or default_namespace,
        spec=spec,
        uid=meta.get("uid"),
        kind=kind,
    )


@dataclass(frozen=True)
class Review:
    """What `spyre-operator validate` and the admission webhook say about one object: the
    parsed model, or every problem; a known-config warning does not make it invalid."""

    model: SpyreModel | None
    problems: list[Problem]
    warning: str | None = None


def review(
    obj: object,
    default_namespace: str = "default",
    model_config: Mapping[str, Any] | None = None,
    *,
    from_file: bool = False,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
) -> Review:
    """Every problem of a SpyreModel (or SpyreCache) object, or the model and its
    known-config warning (`model_config`: the model's config.json, to find its entry by
    architecture). `from_file`, `images`: as for parse (`spyre-operator validate`)."""
    kind = CACHE_KIND if isinstance(obj, Mapping) and obj.get("kind") == CACHE_KIND else KIND
    try:
        model = parse(obj, default_namespace, kind, from_file=from_file, images=images)
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


def _check(
    obj: object,
    kind: str = KIND,
    from_file: bool = False,
    images: runtimes.RuntimeImages = runtimes.DEFAULT_IMAGES,
) -> tuple[SpyreModelSpec | None, list[Problem]]:
    if not isinstance(obj, Mapping):
        return None, [Problem("", f"expected a {kind} object (a mapping), got {_described(obj)}")]
    problems = list(field_problems(obj)) if from_file else []
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != kind:
        got = clip(f"{obj.get('apiVersion')}/{obj.get('kind')}")
        problems.append(
            Problem("kind", f"expected apiVersion {API_VERSION} kind {kind}, got {got}")
        )
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if not is_dns_label(meta.get("name"), DNS_1035):
        problems.append(
            Problem(
                "metadata.name",
                "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
                "letter, at most 63 characters) because it names the Deployment and the "
                f"Service, got {_described(meta.get('name'))}",
            )
        )
    namespace = meta.get("namespace")
    if namespace not in (None, "") and not is_dns_label(namespace, DNS_1123):
        problems.append(
            Problem(
                "metadata.namespace",
                "must be a namespace name, a DNS-1123 label (lowercase letters, digits and "
                "'-', starting and ending with a letter or digit, at most 63 characters), got "
                f"{_described(namespace)}: quote it in YAML if it reads as another type",
            )
        )
    problems += metadata_problems(meta)
    for part in ("metadata", "spec"):
        problems += nul_problems(obj.get(part), part, MAX_PROBLEMS)
    if "spec" not in obj:
        return None, _bounded([*problems, Problem("spec", "required field is missing")])
    spec, spec_problems = validate_spec(obj["spec"])
    if spec is not None:  # the operator's images, not the spec alone, decide this one
        spec_problems += image_rules.card_image(spec, images)
    return spec, _bounded(problems + spec_problems)


def is_dns_label(value: object, pattern: re.Pattern[str]) -> bool:
    return isinstance(value, str) and len(value) <= 63 and pattern.fullmatch(value) is not None


def _bounded(problems: list[Problem]) -> list[Problem]:
    """At most MAX_PROBLEMS, then how many more: one object's answer stays short."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    more = len(problems) - MAX_PROBLEMS
    return [*problems[:MAX_PROBLEMS], Problem("spec", f"and {more} more problems")]


def _described(value: object) -> str:
    """A value as a message names it (YAML's words: null, true, a mapping)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return shown(value)


def _translate(err: ErrorDetails) -> Problem:
    loc = err["loc"]
    path = clip(join_path("spec", *loc), MAX_PATH)
    ctx, value, kind = err.get("ctx", {}), err.get("input"), err["type"]
    got = _described(value)
    if kind == "missing":
        message = "required field is missing"
    elif kind == "extra_forbidden":
        message = unknown_field(str(loc[-1]), _fields_at(loc[:-1]))
    elif kind == "multiple_of" and isinstance(value, int):
        step = ctx["multiple_of"]
        low = value // step * step
        fix = f"{low} or {low + step}" if low else str(step)
        message = f"must be a multiple of {step}, got {value}: use {fix}"
    elif kind in ("greater_than_equal", "less_than_equal"):
        bound, word = (ctx["ge"], "least") if kind == "greater_than_equal" else (ctx["le"], "most")
        message = f"must be at {word} {bound}, got {got}"
    elif kind == "literal_error":
        message = f"must be one of {ctx['expected']}, got {got}"
    elif kind == "string_pattern_mismatch":
        message = f"must match {ctx['pattern']}, got {got}"
    elif kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        message = _size_message(kind, ctx, value)
    elif kind == "quantity":
        message = err["msg"]
    elif kind == "string_type" and isinstance(value, bool | int | float):
        # e.g. `sidecar.istio.io/inject: true` in YAML
        message = f'must be a string, got {got}: quote it in YAML ("{got}")'
    elif kind in _TYPE_WORDS:
        message = f"must be {_TYPE_WORDS[kind]}, got {got}" + _unquote_hint(kind, value)
    else:  # pydantic's words, without its class names
        text = re.sub(r" or instance of \w+", "", err["msg"]).replace("Input should be", "must be")
        message = f"{text}, got {got}"
    hint = HINTS.get(re.sub(r"\[[^]]*\]", "", path))
    return Problem(path, f"{message} ({hint})" if hint else message)


# Type errors in YAML's words (strict, as the API server is: "32" is no integer).
_TYPE_WORDS = {
    "int_type": "an integer",
    "bool_type": "true or false",
    "string_type": "a string",
    "model_type": "a mapping of fields",
    "dict_type": "a mapping",
    "list_type": "a list",
    "float_type": "a number",
}


def _unquote_hint(kind: str, value: object) -> str:
    if kind == "int_type" and isinstance(value, str) and value.strip().isdecimal():
        return f": write it without quotes ({clip(value.strip())})"
    if kind == "int_type" and isinstance(value, float):
        return ": use a whole number"
    if kind == "bool_type" and isinstance(value, str) and value.lower() in ("true", "false"):
        return f": write it without quotes ({value.lower()})"
    return ""


def _size_message(kind: str, ctx: dict[str, Any], value: object) -> str:
    short = "short" in kind
    word, bound = ("least", ctx.get("min_length")) if short else ("most", ctx.get("max_length"))
    if kind.startswith("string"):
        got = len(value) if isinstance(value, str) else None
        unit = "character" + ("s" if bound != 1 else "")
    else:
        got, unit = ctx.get("actual_length"), "item" + ("s" if bound != 1 else "")
    if kind == "string_too_short" and bound == 1:
        return "must not be empty"
    return f"must have at {word} {bound} {unit}" + (f", got {got}" if got is not None else "")


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The camelCase field names valid where `loc` (pydantic's path from the spec) points:
    "did you mean" suggests only those."""
    annotation: Any = SpyreModelSpec
    for part in loc:
        model = _model_in(annotation)
        if model is None:
            return []
        if isinstance(part, str):  # a field; an int is a list index: same element model
            fields = {str(info.alias): info for info in model.model_fields.values()}
            if part not in fields:
                return []
            annotation = fields[part].annotation
    model = _model_in(annotation)
    return sorted(str(info.alias) for info in model.model_fields.values()) if model else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for inner in _types_in(annotation):
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return None


def _types_in(annotation: Any) -> Iterator[Any]:
    yield annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            yield from _types_in(arg)


__all__ = ["InvalidSpec", "Problem", "Review", "SpyreModel", "parse", "review", "validate"]
