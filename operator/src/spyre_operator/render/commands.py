"""Subcommands `crd`, `render` and `validate` (filled in by the API work)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add this module's subcommands to the `spyre-operator` parser."""
    del sub


def _unused(args: argparse.Namespace) -> int:
    return 0
