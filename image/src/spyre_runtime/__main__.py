"""`python3 -m spyre_runtime <command> ...`: the injected runtime's entrypoint (an image
without spyre-runtime, run with its own interpreter; render/inject.py in the operator)."""

import sys

from .cli import main
from .imagesetup import prepare

prepare()
sys.exit(main())
