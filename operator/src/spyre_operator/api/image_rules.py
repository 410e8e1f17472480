"""Rules of the serving image's family and architecture (docs/api.md, "Image profiles")."""

from __future__ import annotations

from collections.abc import Iterator

from spyre_operator.api import imageref, profiles, runtimes
from spyre_operator.api.problem import Problem, shown
from spyre_operator.api.spec import CPU_BACKENDS, SpyreModelSpec

PROFILE = "spec.runtime.imageProfile"


def image_profile(s: SpyreModelSpec) -> Iterator[Problem]:
    """An upstream family ships one plugin and needs its image named; an upstream image
    cannot run with the spyre-serving profile (its entrypoint knows none of our commands)."""
    p = s.image_profile
    if p.flavour is not None and p.flavour != s.runtime.flavour:
        yield Problem(
            "spec.runtime.flavour",
            f"the {p.name} images carry the {p.flavour} plugin, not {s.runtime.flavour}: set "
            f"runtime.flavour: {p.flavour}",
        )
    if p.injected and s.image is None:
        yield Problem(
            "spec.image",
            f"{PROFILE} {p.name} runs the image you name, unmodified, and the operator picks "
            f"none for you: set spec.image, e.g. {p.example}",
        )
    if not p.injected and s.image is not None and imageref.IMAGE_REF.fullmatch(s.image):
        family = profiles.upstream_profile(imageref.parse(s.image).path)
        if family is not None:
            yield Problem(
                PROFILE,
                f"{shown(s.image)} is an upstream image without spyre-runtime (its entrypoint "
                f"knows none of the operator's commands): set {PROFILE}: {family}, and the "
                "operator brings the runtime to it",
            )


def architecture(s: SpyreModelSpec) -> Iterator[Problem]:
    """The image's architecture decides the nodes; a selector that says another is a
    pod that never starts, an image tagged for another (IBM's `<version>.<arch>`) one
    that cannot run there."""
    arch = s.runtime.architecture
    tagged = profiles.tagged_architecture(s.image) if s.image else None
    if arch is not None and tagged is not None and tagged != arch:
        yield Problem(
            "spec.runtime.architecture",
            f"is {arch} but the image's tag names {tagged} ({shown(s.image)}): use the "
            f"image's .{arch} tag, or set architecture: {tagged}",
        )
    selectors = {
        "spec.nodeSelector": s.node_selector,
        "spec.cache.compile.nodeSelector": s.cache.compile.node_selector or {},
    }
    for path, selector in selectors.items():
        other = selector.get(profiles.ARCH_LABEL)
        if arch is not None and other is not None and other != arch:
            yield Problem(
                f"{path}[{profiles.ARCH_LABEL}]",
                f"is {shown(other)} but spec.runtime.architecture is {arch}: remove the "
                "selector (the architecture sets it) or change the architecture",
            )


def card_image(s: SpyreModelSpec, images: runtimes.RuntimeImages) -> Iterator[Problem]:
    """A model on cards without spec.image, where the operator's repository has no card
    images (its `cards` is false): a refusal now, not a pod that pulls a tag nobody built
    or a CPU image that cannot drive a card."""
    if images.cards or s.image is not None or s.image_profile.injected:
        return  # an upstream profile without an image is image_profile's to refuse
    if s.backend in CPU_BACKENDS:  # (only a card model compiles with another backend)
        return
    ships = [p for p in profiles.PROFILES.values() if p.injected and p.flavour == s.flavour.name]
    named = " or ".join(f"{PROFILE}: {p.name} (e.g. {p.example})" for p in ships)
    yield Problem(
        "spec.image",
        f"is required for backend {s.backend} (Spyre cards): the operator's serving images "
        "are for CPU only (its runtimeImage.cards is false, as a release's are). Set "
        f"spec.image to IBM's or Red Hat's vLLM-Spyre image with {named}; or run on CPU "
        "with backend eager or inductor",
    )
