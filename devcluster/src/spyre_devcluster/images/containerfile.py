"""Read a Containerfile into instructions the local builder runs (pure, no I/O).

Only what the project's two Containerfiles use is supported, in one stage: ARG, FROM,
LABEL, USER, COPY [--chmod], RUN, ENV, ENTRYPOINT, CMD, WORKDIR. Anything else is an error
that names the line, so a new instruction in a Containerfile cannot be silently ignored.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

SUPPORTED = ("ARG", "FROM", "LABEL", "USER", "COPY", "RUN", "ENV", "ENTRYPOINT", "CMD", "WORKDIR")
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


class ContainerfileError(ValueError):
    pass


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str
    flags: tuple[tuple[str, str], ...] = ()

    def flag(self, name: str) -> str | None:
        return dict(self.flags).get(name)

    def fail(self, message: str) -> ContainerfileError:
        return ContainerfileError(f"line {self.line} ({self.keyword}): {message}")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines (also inside a join)."""
    lines: list[tuple[int, str]] = []
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not parts and (not stripped or stripped.startswith("#")):
            continue
        if parts and stripped.startswith("#"):
            continue
        if not parts:
            start = number
        if stripped.endswith("\\"):
            parts.append(raw.rstrip()[:-1])
            continue
        parts.append(raw)
        lines.append((start, " ".join(p.strip() for p in parts if p.strip())))
        parts = []
    if parts:
        raise ContainerfileError(f"line {start}: the file ends inside a continued line")
    return lines


def parse(text: str) -> list[Instruction]:
    instructions = []
    for number, line in _logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword not in SUPPORTED:
            raise ContainerfileError(
                f"line {number}: {keyword} is not supported by the local image builder "
                f"(supported: {', '.join(SUPPORTED)})"
            )
        flags = []
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags.append((name, value))
            rest = rest.strip()
        instruction = Instruction(number, keyword, rest, tuple(flags))
        allowed = {"chmod"} if keyword == "COPY" else set()
        unknown = {name for name, _ in flags} - allowed
        if unknown:
            raise instruction.fail(f"unsupported flag --{sorted(unknown)[0]}")
        instructions.append(instruction)
    froms = [i for i in instructions if i.keyword == "FROM"]
    if len(froms) != 1:
        raise ContainerfileError(f"expected exactly one FROM (one stage), found {len(froms)}")
    if " " in froms[0].args.strip():
        raise froms[0].fail("only `FROM <image>` is supported (no AS, no --platform)")
    return instructions


def substitute(value: str, variables: dict[str, str]) -> str:
    """Expand $VAR and ${VAR} the way a Containerfile does outside RUN (unset: empty)."""
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), value)


def exec_form(instruction: Instruction) -> tuple[str, ...]:
    """ENTRYPOINT/CMD/RUN arguments: the JSON list form, or `/bin/sh -c` for shell form."""
    text = instruction.args.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise instruction.fail(f"not a JSON list of strings: {exc}") from exc
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise instruction.fail("not a JSON list of strings")
        return tuple(value)
    return ("/bin/sh", "-c", text)


def pairs(instruction: Instruction, variables: dict[str, str]) -> list[tuple[str, str]]:
    """The key=value pairs of LABEL, ENV and ARG (ENV also allows `ENV key value`)."""
    words = shlex.split(instruction.args)
    if instruction.keyword == "ENV" and words and "=" not in words[0]:
        key, _, value = instruction.args.strip().partition(" ")
        return [(key, substitute(value.strip(), variables))]
    result = []
    for word in words:
        key, eq, value = word.partition("=")
        if not key or (not eq and instruction.keyword != "ARG"):
            raise instruction.fail(f"expected key=value, got {word!r}")
        result.append((key, substitute(value, variables) if eq else ""))
    return result


def copy_paths(instruction: Instruction, variables: dict[str, str]) -> tuple[list[str], str]:
    words = [substitute(w, variables) for w in shlex.split(instruction.args)]
    if len(words) < 2:
        raise instruction.fail("COPY needs at least one source and a destination")
    if len(words) > 2 and not words[-1].endswith("/"):
        raise instruction.fail("with several sources the destination must end with /")
    return words[:-1], words[-1]


def parse_chmod(instruction: Instruction) -> int | None:
    value = instruction.flag("chmod")
    if value is None:
        return None
    if not re.fullmatch(r"[0-7]{3,4}", value):
        raise instruction.fail(f"--chmod={value}: only octal modes are supported")
    return int(value, 8)
