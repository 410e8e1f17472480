"""`python3 -m spyre_runtime <command> ...`: the injected runtime's entrypoint (an image
without spyre-runtime, run with its own interpreter; render/inject.py in the operator).

The version check comes first and in the oldest syntax (the package needs 3.11): an image
whose Python is older ends with exit 2 and an ImageUnusable summary (contract.py), as
imagecheck.py's refusals do, so the operator names the image and the fix."""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 (the image's Python may be older than ours)
    import json
    import os

    said = (
        "the image's Python ({}) is {}: spyre-runtime needs 3.11 or later: name a "
        "vLLM-Spyre image with a newer Python in spec.image"
    ).format(sys.executable, ".".join(map(str, sys.version_info[:3])))
    log = os.environ.get("SPYRE_SERVING_TERMINATION_LOG") or "/dev/termination-log"
    try:
        with open(log, "w") as summary:
            summary.write(json.dumps({"ok": False, "reason": "ImageUnusable", "message": said}))
    except OSError:
        pass
    sys.stderr.write(said + "\n")
    sys.exit(2)

from .injected import main

sys.exit(main())
