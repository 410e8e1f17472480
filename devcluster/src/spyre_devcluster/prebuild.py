"""Build the Go programs the chart and node tiers start (kstatus, cert-manager, the
Prometheus Operator with Prometheus, KEDA) ahead of the tests that need them:
`scripts/test` runs this in the background while the runtime environments install, so
the builds overlap those downloads instead of following them. Each build is cached; a
test that needs one waits for it (the install lock) or, if it failed here, builds it again
and reports why."""

from __future__ import annotations

import sys
from collections.abc import Callable

from spyre_devcluster import certmanager, keda, prometheus_operator
from spyre_devcluster.install import go_commands

BUILDS: dict[str, Callable[[], object]] = {
    "kstatus": lambda: go_commands("kstatus", {"kstatus": "."}),
    "cert-manager": certmanager.program,
    "the Prometheus Operator and Prometheus": prometheus_operator.programs,
    "KEDA": keda.programs,
}


def main() -> int:
    failed = []
    for name, build in BUILDS.items():
        try:
            build()
        except Exception as err:  # the test that needs it builds it again and says why
            print(f"prebuild: {name} failed: {err}", file=sys.stderr)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
