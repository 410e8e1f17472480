"""A problem found in a SpyreModel: the field path and a message saying the rule and the fix."""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def join_path(base: str, *parts: int | str) -> str:
    """`spec.env[2].name`, `spec.resources.limits["ibm.com/spyre_pf"]`."""
    for part in parts:
        if isinstance(part, int):
            base += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            base += f".{part}"
        else:
            base += f'["{part}"]'
    return base


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidSpec(ValueError):
    """Raised by api.validation.parse; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems
