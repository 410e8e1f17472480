"""cert-manager on the testbed: its controllers and its cainjector as host processes
against an API server, and its CRDs.

Both come from github.com/cert-manager/cert-manager at the version gomod/cert-manager's
go.mod requires: the programs are our entry point to its packages (gomod/cert-manager/
main.go: the proxy does not serve the modules of its own commands), built once into the
install cache (install.go_commands); the CRDs are the module's deploy/crds.
"""

from __future__ import annotations

from pathlib import Path

from spyre_devcluster.host_programs import HostPrograms
from spyre_devcluster.install import go_commands, go_module_dir

FOLDER = "cert-manager"  # gomod/<FOLDER>
COMMANDS = ("controller", "cainjector")


def program() -> Path:
    return go_commands(FOLDER, {FOLDER: "."})[FOLDER]


def crd_files() -> list[Path]:
    """The CRDs of the cert-manager release the programs are built from."""
    return sorted((go_module_dir(FOLDER) / "deploy" / "crds").glob("*.yaml"))


class CertManager(HostPrograms):
    """cert-manager's controller and cainjector, each a process with its log in `logs`."""

    def __init__(self, kubeconfig: Path, logs: Path, namespace: str = "cert-manager") -> None:
        super().__init__("cert-manager", logs)
        binary = program()
        for command in COMMANDS:
            args = [str(binary), command, "-kubeconfig", str(kubeconfig)]
            if command == "controller":
                args += ["-cluster-resource-namespace", namespace]
            self.start(command, args)
