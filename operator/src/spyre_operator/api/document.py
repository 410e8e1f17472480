"""The document around the spec, checked as the API server checks it: the top-level keys and
the metadata's fields (a file only: the API server has decoded what the webhook and the
operator read, so an unknown field there can only be a newer Kubernetes' own), its labels
and annotations, and strings with a NUL character in the spec and metadata (a C string
ends there: the container runtime's environment and arguments, the kubelet's files)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from spyre_operator.api.labels import annotation_problems, label_problems
from spyre_operator.api.problem import Problem, join_path, shown

TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")
# metav1.ObjectMeta's fields (tests/unit/test_api_document.py compares them with the
# kubernetes client's V1ObjectMeta).
OBJECT_META = (
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
)
NUL_RULE = (
    "contains a NUL character (\\x00), where the programs that read it (the container "
    "runtime, vLLM, the kubelet) end the string: remove it"
)


def unknown_field(name: str, here: list[str]) -> str:
    """`unknown field`, with the closest valid name or else the valid names."""
    guess = difflib.get_close_matches(name, here, n=1)
    message = "unknown field" + (f": did you mean {guess[0]}?" if guess else "")
    if here and not guess:
        message += f" (fields here: {', '.join(here)})"
    return message


def field_problems(obj: Mapping[str, Any]) -> Iterator[Problem]:
    """Top-level keys and metadata fields the API server does not know (it drops them, and
    with field validation, kubectl's default, refuses the request)."""
    for key in obj:
        if key not in TOP_LEVEL:
            yield Problem(
                join_path("", str(key)).lstrip("."), unknown_field(str(key), [*TOP_LEVEL])
            )
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        for key in meta:
            if key not in OBJECT_META:
                yield Problem(
                    join_path("metadata", str(key)), unknown_field(str(key), [*OBJECT_META])
                )


def metadata_problems(meta: Mapping[str, Any]) -> Iterator[Problem]:
    """labels and annotations: maps of strings, with Kubernetes' rules for keys and values."""
    for field in ("labels", "annotations"):
        path = f"metadata.{field}"
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            yield Problem(path, "must be a mapping of strings")
            continue
        texts = {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
        for key, item in value.items():
            if key not in texts:
                yield Problem(
                    join_path(path, str(key)),
                    f"keys and values must be strings, got {shown(key)}: {shown(item)}: quote "
                    "them in YAML",
                )
        if field == "labels":
            yield from label_problems(path, texts)
        else:
            yield from annotation_problems(path, texts)


def nul_problems(value: object, path: str, limit: int) -> Iterator[Problem]:
    """Every key and string with a NUL character, at most `limit`. Each container is read
    once (an alias bomb shares them): linear in the document's distinct parts; a path is
    spelled only for what is found (a 1 MB file may have 40,000 keys)."""
    seen: set[int] = set()
    # (item, (parent chain, its key or index)): the chain is unwound into a path on a hit
    stack: list[tuple[object, Any]] = [(value, None)]
    found = 0
    while stack and found < limit:
        item, chain = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                found += 1
                yield Problem(_spelled(path, chain), NUL_RULE)
            continue
        if not isinstance(item, Mapping | list) or id(item) in seen:
            continue
        seen.add(id(item))
        pairs = enumerate(item) if isinstance(item, list) else item.items()
        for key, sub in reversed(list(pairs)):
            if isinstance(key, str) and "\x00" in key:
                found += 1
                yield Problem(_spelled(path, (chain, key)), f"its key {NUL_RULE}")
            stack.append((sub, (chain, key)))


def _spelled(path: str, chain: Any) -> str:
    parts: list[int | str] = []
    while chain is not None:
        chain, part = chain
        parts.append(part if isinstance(part, int) else str(part))
    return join_path(path, *reversed(parts))
