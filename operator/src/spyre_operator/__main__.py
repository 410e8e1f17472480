import sys

from spyre_operator.cli import main

sys.exit(main())
