"""Asks the plugin's own catalog matcher (not a re-implementation) about a cache's catalog.

    python match_catalog.py <plugin module> <cache dir> <vllm serve args...>

run with a flavour venv's python and the serving env; builds the VllmConfig that
`vllm serve <args>` would, and prints `MATCH=<index of the matching entry, -1 for none>`.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from spyre_runtime.contract import CATALOG_NAME
from spyre_runtime.warmup import build_vllm_config


def main() -> None:
    module, cache_dir, *args = sys.argv[1:]
    vllm_config = build_vllm_config(args)
    matcher = importlib.import_module(f"{module}.compilation_utils")
    catalog = json.loads((Path(cache_dir) / CATALOG_NAME).read_text())
    print(f"MATCH={matcher.match_from_pre_compile_catalog(catalog, vllm_config)}")


if __name__ == "__main__":
    main()
