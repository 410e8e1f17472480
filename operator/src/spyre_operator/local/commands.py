"""Subcommands `cluster up|down|install` for the local control plane."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    del sub
