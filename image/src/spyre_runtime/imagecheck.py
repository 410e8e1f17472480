"""Does the image the operator brought spyre-runtime to have what it needs? (an upstream
image profile: the image is the user's, anything may be in it).

Read from package metadata, nothing imported: an image without vLLM, without the flavour's
plugin, or with another version of it than the SpyreModel declares (runtime.version is in
the cache key and the catalog entry) is refused before vLLM starts, with the field to set.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from .contract import FLAVOURS, Flavour

MIN_PYTHON = (3, 11)


def installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def image_problem(flavour: Flavour, compile_config: Mapping[str, Any] | None) -> str | None:
    """What this interpreter lacks to run the flavour's vLLM, and what to set; None: fine."""
    where = f"the image's Python ({sys.executable})"
    if installed("vllm") is None:
        return f"{where} has no vLLM: name a vLLM-Spyre image in spec.image"
    version = installed(flavour.module)
    if version is None:
        others = [(f, v) for f in FLAVOURS.values() if (v := installed(f.module))]
        if others:
            other, found = others[0]
            return (
                f"{where} has the {other.name} plugin {found}, not {flavour.name}: set "
                f"spec.runtime.flavour: {other.name} (and its runtime.imageProfile)"
            )
        return f"{where} has no vLLM-Spyre plugin ({flavour.module}): name a {flavour.name} image"
    runtime = (compile_config or {}).get("runtime") or {}
    declared = runtime.get("version")
    if declared and declared != version:
        return (
            f"{where} has {flavour.module} {version}, the SpyreModel declares {declared}: set "
            f"spec.runtime.version: {version} (it is part of the cache key and the catalog)"
        )
    return None
