"""`python3 -m spyre_runtime <command> ...`: the injected runtime's entrypoint (an image
without spyre-runtime, run with its own interpreter; render/inject.py in the operator).

The version check comes first and in the oldest syntax: the package needs 3.11."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 (the image's Python may be older than ours)
    found = ".".join(map(str, sys.version_info[:3]))
    sys.exit(f"spyre-runtime needs Python 3.11 or later, the image's {sys.executable} is {found}")

from .injected import main

sys.exit(main())
