"""Drift of an owned child: does the live object lack or change anything the manifest
sets? (Pure; decide writes a child only then.)"""

from __future__ import annotations

from typing import Any

from kubernetes.utils.quantity import parse_quantity


def _same_scalar(want: Any, have: Any) -> bool:
    if want == have:
        return True
    if isinstance(want, bool) or isinstance(have, bool):
        return False
    if isinstance(want, int | str) and isinstance(have, int | str):
        try:  # quantities: "2000m" is stored as "2"
            return bool(parse_quantity(want) == parse_quantity(have))
        except ValueError:
            return False
    return False


def differs(want: Any, have: Any) -> bool:
    """True when `have` lacks or changed something `want` sets. Extra fields, and extra
    items in lists of objects (env, volumes, tolerations, ...), are fine: the API server
    adds defaults, and server-side apply leaves what other field managers set alone."""
    if isinstance(want, dict):
        return not isinstance(have, dict) or any(differs(v, have.get(k)) for k, v in want.items())
    if not isinstance(want, list):
        return not _same_scalar(want, have)
    if not isinstance(have, list):
        return True
    if want and all(isinstance(w, dict) for w in want):
        return any(all(differs(w, h) for h in have) for w in want)
    return len(want) != len(have) or any(
        not _same_scalar(w, h) for w, h in zip(want, have, strict=True)
    )


def needs_apply(manifest: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """Anything to write? The manifest's hash annotation changes with every change of the
    desired object (removed fields too); the rest catches edits of the live object."""
    if live is None:
        return True
    return differs({"metadata": manifest["metadata"], "spec": manifest["spec"]}, live)
