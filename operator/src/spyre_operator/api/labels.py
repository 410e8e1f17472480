"""Label and annotation keys and values, checked as Kubernetes checks them (IsQualifiedName,
IsValidLabelValue, ValidateAnnotations): in metadata, in the pods' labels and annotations,
in selectors and node label keys."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from spyre_operator.api.base import DNS_SUBDOMAIN
from spyre_operator.api.problem import Problem, join_path, shown

# Kubernetes' limit on all annotations of an object together (keys and values, in bytes).
ANNOTATIONS_MAX_BYTES = 256 * 1024
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
KEY_RULE = (
    "an optional DNS subdomain prefix and '/' (e.g. example.com/), then a name of at most "
    "63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit"
)
VALUE_RULE = (
    "empty, or at most 63 letters, digits, '-', '_' or '.' that start and end with a "
    "letter or digit"
)


def qualified_name(key: str) -> bool:
    """Kubernetes' IsQualifiedName (label and annotation keys). fullmatch: `$` would let a
    trailing newline through."""
    *prefix, name = key.split("/", 1)
    if prefix and not (len(prefix[0]) <= 253 and SUBDOMAIN.fullmatch(prefix[0])):
        return False
    return len(name) <= 63 and LABEL_NAME.fullmatch(name) is not None


def key_problems(where: str, key: str, what: str = "a label") -> Iterator[Problem]:
    if not qualified_name(key):
        yield Problem(where, f"{shown(key)} is not {what} key: {KEY_RULE}")


def value_problems(where: str, value: str) -> Iterator[Problem]:
    if value and not (len(value) <= 63 and LABEL_NAME.fullmatch(value)):
        yield Problem(where, f"{shown(value)} is not a label value: {VALUE_RULE}")


def label_problems(path: str, labels: Mapping[str, str]) -> Iterator[Problem]:
    for key, value in labels.items():
        yield from key_problems(join_path(path, key), key, "a label")
        yield from value_problems(join_path(path, key), value)


def annotation_problems(path: str, annotations: Mapping[str, str]) -> Iterator[Problem]:
    """Keys are qualified names once lowercased (as Kubernetes checks them); keys and values
    together at most 256 KiB."""
    for key in annotations:
        if not qualified_name(key.lower()):
            yield Problem(
                join_path(path, key), f"{shown(key)} is not an annotation key: {KEY_RULE}"
            )
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        yield Problem(
            path,
            f"keys and values come to {size} bytes; Kubernetes allows {ANNOTATIONS_MAX_BYTES} "
            "in all: move large values elsewhere (a ConfigMap)",
        )
