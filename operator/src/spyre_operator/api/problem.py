"""A problem found in a SpyreModel: the field path and a message saying the rule and the fix."""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The most of a value a message quotes: a hostile value (a huge string, an alias bomb)
# must not make a message, a status or an admission answer huge.
SHOWN_LIMIT = 200
# Past this, str(int) raises (Python's 4,300-digit limit) or is just long: say the size.
_LONG_INT_BITS = 600


class _Repr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _LONG_INT_BITS:
            return f"a number of about {int(x.bit_length() * 0.30103) + 1} digits"
        return super().repr_int(x, level)

    def repr_str(self, x: str, level: int) -> str:
        if len(x) <= SHOWN_LIMIT:
            return repr(x)
        return f"{x[: SHOWN_LIMIT // 2]!r}... ({len(x)} characters)"


_REPR = _Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = SHOWN_LIMIT
_REPR.maxlevel = 3


def shown(value: object) -> str:
    """repr(value) for a message, at most about SHOWN_LIMIT characters: reprlib stops at
    a few items and levels, so it never walks a whole alias bomb."""
    return clip(_REPR.repr(value), SHOWN_LIMIT)


def clip(text: str, limit: int = SHOWN_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def join_path(base: str, *parts: int | str) -> str:
    """`spec.env[2].name`, `spec.resources.limits["ibm.com/spyre_pf"]`."""
    for part in parts:
        if isinstance(part, int):
            base += f"[{part}]"
        elif len(part) > 253 or not part.isprintable() or '"' in part:
            base += f"[{shown(part)}]"  # a hostile key: quoted with its escapes, clipped
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
