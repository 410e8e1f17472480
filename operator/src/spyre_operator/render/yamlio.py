"""YAML in and out for the CLI: multi-document, deterministic, no anchors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # repeated dicts are written out, never as &id001 anchors


def dump_documents(docs: Iterable[Any], header: str = "") -> str:
    body = yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, explicit_start=True, width=100)
    return header + body


def load_documents(text: str) -> list[Any]:
    """Every non-empty document; raises yaml.YAMLError on bad YAML."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]
