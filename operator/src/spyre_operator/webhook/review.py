"""What the admission webhook answers for a SpyreModel (or SpyreCache) create or update:
the verdict of `spyre-operator validate` (api/validation.review, the same function), as a
refusal with every problem on a line of its own (`spec.path: message`), and the
known-config warning as an admission warning (kubectl prints `Warning: ...`; the object is
admitted)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spyre_operator.api.runtimes import DEFAULT_IMAGES, RuntimeImages
from spyre_operator.api.validation import review


@dataclass(frozen=True)
class Answer:
    refusal: str | None = None  # None: admitted
    warnings: list[str] = field(default_factory=list)


def answer(
    operation: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    images: RuntimeImages = DEFAULT_IMAGES,
) -> Answer:
    """The webhook's answer, judged with the operator's serving images (`images`). An
    update that leaves the spec as it is (labels, annotations, finalizers, deletion) is
    admitted without a look: an object admitted before (while the webhook was away, or
    under older rules) must stay editable and deletable; its status says InvalidSpec
    anyway."""
    if operation not in ("CREATE", "UPDATE"):
        return Answer()
    if operation == "UPDATE" and old is not None and old.get("spec") == obj.get("spec"):
        return Answer()
    verdict = review(obj, images=images)
    if verdict.problems:
        return Answer(refusal="\n".join(str(problem) for problem in verdict.problems))
    return Answer(warnings=[verdict.warning] if verdict.warning else [])
