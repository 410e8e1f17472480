"""Shared pydantic configuration and Kubernetes-shaped field types."""

from __future__ import annotations

import math
import re
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
_QUANTITY = re.compile(
    r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
)


# Kubernetes keeps a quantity as an int64 scaled value: anything longer is refused there.
_QUANTITY_MAX_CHARS = 64


def _quantity(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
        return str(value)
    if isinstance(value, str) and len(value) <= _QUANTITY_MAX_CHARS and _QUANTITY.match(value):
        return value
    raise PydanticCustomError(
        "quantity",
        "must be a Kubernetes quantity such as 8, 7500m or 64Gi, got {input}",
        {"input": shown(value)},
    )


Quantity = Annotated[
    str,
    PlainValidator(_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True}),
]


def cpu_cores(quantity: str) -> int:
    """Whole cores in a CPU quantity, at least 1 ("7500m" -> 7); ValueError if not a CPU amount
    (e.g. "1e400", which is a quantity but no finite number of cores)."""
    cores = int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
    if not math.isfinite(cores):
        raise ValueError(f"{quantity} is not a finite number of cores")
    return max(1, math.floor(cores))


# A free-form Kubernetes object (e.g. core/v1 Affinity), passed through unchanged.
FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
Name = Annotated[str, Field(min_length=1, max_length=253)]
# A name Kubernetes checks as a DNS-1123 subdomain (Secrets, ServiceAccounts,
# PriorityClasses): a wrong one is refused here rather than when a pod is created.
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
LabelMap = dict[str, str]
