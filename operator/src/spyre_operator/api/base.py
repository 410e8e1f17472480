"""Shared pydantic configuration and Kubernetes-shaped field types."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from spyre_operator.api.problem import shown


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields are errors (typos);
    strict as the API server is: an integer field refuses "32" and true."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        use_attribute_docstrings=True,
    )

    def to_k8s(self) -> dict[str, Any]:
        """The object as the Kubernetes API spells it (camelCase, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# Kubernetes resource.Quantity: "8", "7500m", "64Gi" or a plain integer. Kept as a string,
# the form the API expects in a manifest (server-side apply refuses a number there).
QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")


# Kubernetes keeps a quantity as an int64 scaled value: anything longer is refused there.
_QUANTITY_MAX_CHARS = 64


def _quantity(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return str(value)
    if isinstance(value, str) and len(value) <= _QUANTITY_MAX_CHARS and QUANTITY.fullmatch(value):
        return value
    raise PydanticCustomError(
        "quantity",
        "must be a Kubernetes quantity such as 8, 7500m or 64Gi, got {input}",
        {"input": shown(value)},
    )


Quantity = Annotated[
    str,
    PlainValidator(_quantity),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "maxLength": _QUANTITY_MAX_CHARS,
            "pattern": QUANTITY.pattern,  # the API server checks strings only (as controller-gen)
        }
    ),
]


# Kubernetes IntOrString as a Deployment's maxSurge/maxUnavailable read it: a count of pods
# or a percent of the replicas. Kept as given (an int stays an int: the API server
# refuses "1" where it means a count).
PERCENT = re.compile(r"^[0-9]{1,5}%$")
_COUNT_MAX = 100_000


def _int_or_percent(value: object) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _COUNT_MAX:
        return value
    if isinstance(value, str) and PERCENT.fullmatch(value):
        return value
    raise PydanticCustomError(
        "int_or_percent",
        "must be a number of pods (0 to {most}) or a percent of the replicas such as 25%, "
        "got {input}",
        {"input": shown(value), "most": _COUNT_MAX},
    )


IntOrPercent = Annotated[
    int | str,
    PlainValidator(_int_or_percent),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "maxLength": 6,
            "pattern": PERCENT.pattern,  # strings only, as for Quantity
        }
    ),
]


def is_zero(value: int | str) -> bool:
    """0 or 0%: what Kubernetes refuses for both maxSurge and maxUnavailable."""
    return int(str(value).rstrip("%")) == 0


_SCALE = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# Past 10**±40 a quantity is beyond anything Kubernetes counts (int64 of its units).
_EXPONENT_LIMIT = 40


def quantity_value(quantity: str) -> Fraction:
    """The exact amount a quantity string stands for ("1.5Gi" -> 1610612736); an exponent
    beyond 10**±40 is clamped there (the value stays exact enough to compare)."""
    match = QUANTITY.fullmatch(quantity)
    if match is None:
        raise ValueError(f"{quantity} is not a quantity")
    number, suffix = Fraction(match.group(1)), match.group(3) or ""
    if suffix in _BINARY:
        return number * 2 ** _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        exponent = max(-_EXPONENT_LIMIT, min(_EXPONENT_LIMIT, int(suffix[1:])))
    else:
        exponent = _SCALE.get(suffix, 0)
    return number * Fraction(10) ** exponent


def cpu_cores(quantity: str) -> int:
    """Whole cores in a CPU quantity, at least 1 ("7500m" -> 7); ValueError if not a CPU amount
    (e.g. "1e400", which is a quantity but no finite number of cores)."""
    cores = int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
    if not math.isfinite(cores):
        raise ValueError(f"{quantity} is not a finite number of cores")
    return max(1, math.floor(cores))


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
Name = Annotated[str, Field(min_length=1, max_length=253)]
# A name Kubernetes checks as a DNS-1123 subdomain (Secrets, ServiceAccounts,
# PriorityClasses): a wrong one is refused here rather than when a pod is created.
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
# Label values have at most 63 characters (api/rules.py checks keys and values as
# Kubernetes does; a CRD schema cannot constrain map keys); at most 32 labels (each entry of
# a map costs the API server more than a list item: docs/api.md).
LabelValue = Annotated[str, Field(max_length=63)]
LabelMap = Annotated[dict[str, LabelValue], Field(max_length=32)]
