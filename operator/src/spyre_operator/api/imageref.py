"""Image references as the container runtime reads them: `[registry[:port]/]path[:tag][@digest]`.

The registry is the first component when it has a '.' or a ':' or is `localhost` (the
distribution rule: `spyre-serving/runtime` is a path on the default registry, `quay.io/...`
and `127.0.0.1:5000/...` name one). The cache key reads the rest: the same image under
another registry or a mirror is the same image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IMAGE_NAME_MAX = 255
# The distribution grammar (api/rules.py checks spec.image with it).
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF = re.compile(
    rf"(?P<name>(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*)"
    r"(?::\w[\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)


@dataclass(frozen=True)
class Reference:
    registry: str | None  # e.g. quay.io, 127.0.0.1:5000; None: the runtime's default
    path: str  # e.g. spyre-serving/runtime
    tag: str | None
    digest: str | None  # e.g. sha256:<hex>

    @property
    def without_registry(self) -> str:
        """path[:tag][@digest]: what a mirror keeps when it copies the image."""
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.path}{tag}{digest}"


def _is_registry(component: str) -> bool:
    return "." in component or ":" in component or component == "localhost"


def parse(reference: str) -> Reference:
    """Split a reference (checked with IMAGE_REF first: this only splits)."""
    name, _, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    registry = first if slash and _is_registry(first) else None
    remainder = rest if registry is not None else name
    path, colon, tag = remainder.rpartition(":") if ":" in remainder else (remainder, "", "")
    return Reference(registry, path, tag if colon else None, digest or None)


def repository_problem(repository: str) -> str | None:
    """Why `repository` cannot be an image repository (`[registry[:port]/]path`, no tag
    or digest: the operator adds the tag), or None."""
    match = IMAGE_REF.fullmatch(repository)
    if match is None or len(match["name"]) > IMAGE_NAME_MAX:
        return (
            f"{repository!r} is not an image repository: [registry[:port]/]path in lowercase "
            "(e.g. registry.example.com/spyre-serving/runtime)"
        )
    if match["name"] != repository:
        return f"{repository!r}: give it without a tag or digest (the operator adds the tag)"
    return None
