"""cert-manager on the testbed: its controllers and its cainjector as host processes
against an API server, and its CRDs.

Both come from github.com/cert-manager/cert-manager at the version gomod/cert-manager's
go.mod requires: the programs are our entry point to its packages (gomod/cert-manager/
main.go: the proxy does not serve the modules of its own commands), built once into the
install cache (install.go_commands); the CRDs are the module's deploy/crds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from spyre_devcluster.binaries import go_build
from spyre_devcluster.install import go_commands
from spyre_devcluster.install_steps import InstallError

FOLDER = "cert-manager"  # gomod/<FOLDER>
COMMANDS = ("controller", "cainjector")


def program() -> Path:
    return go_commands(FOLDER, {FOLDER: "."})[FOLDER]


def crd_files() -> list[Path]:
    """The CRDs of the cert-manager release the programs are built from."""
    build = go_build(FOLDER)
    go = shutil.which("go") or "go"
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{build.module}@{build.version}"],
        cwd=build.folder,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        detail = (found.stdout + found.stderr).strip()
        raise InstallError(f"{build.module} {build.version}", detail, "check GOPROXY")
    return sorted((Path(json.loads(found.stdout)["Dir"]) / "deploy" / "crds").glob("*.yaml"))


class CertManager:
    """cert-manager's controller and cainjector, each a process with its log in `logs`."""

    def __init__(self, kubeconfig: Path, logs: Path, namespace: str = "cert-manager") -> None:
        binary = program()
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for command in COMMANDS:
            args = [str(binary), command, "-kubeconfig", str(kubeconfig)]
            if command == "controller":
                args += ["-cluster-resource-namespace", namespace]
            with self.log(command).open("ab") as out:
                self.procs[command] = subprocess.Popen(
                    args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )

    def log(self, command: str) -> Path:
        return self.logs / f"cert-manager-{command}.log"

    def check_alive(self) -> None:
        for command, proc in self.procs.items():
            if proc.poll() is not None:
                tail = "\n".join(self.log(command).read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(
                    f"cert-manager {command} exited ({proc.returncode}); its log:\n{tail}"
                )

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
