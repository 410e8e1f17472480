"""`python3 -m spyre_runtime.inject DIR`: copy this package into DIR for another image.

Run by the init container that the operator adds to the pods of an image without
spyre-runtime (an upstream image profile), from the operator's own image. DIR becomes the
pod's PYTHONPATH: the package, and a dist-info that declares the vLLM plugin entry point
(compilereport.py), which vLLM finds through importlib.metadata. Standard library only.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from . import __version__
from .contract import PLUGIN_ENTRY, PLUGIN_GROUP

DIST_NAME = "spyre_runtime_injected"


def inject(dest: Path) -> Path:
    """Copy the package (without bytecode) and its plugin's entry point into dest."""
    package = Path(__file__).resolve().parent
    target = dest / package.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    info = dest / f"{DIST_NAME}-{__version__}.dist-info"
    info.mkdir(exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: {__version__}\n"
    (info / "METADATA").write_text(metadata)
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\n{PLUGIN_ENTRY}\n")
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m spyre_runtime.inject DIR", file=sys.stderr)
        return 2
    print(f"spyre-runtime {__version__} copied to {inject(Path(args[0]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
