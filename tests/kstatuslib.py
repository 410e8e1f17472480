"""What Flux concludes of live SpyreModels and SpyreCaches, and what docs/api.md says it
concludes. The reader is our small Go program over Flux's own kstatus library
(sigs.k8s.io/cli-utils; devcluster gomod/kstatus), built once into the install cache;
the expectations are docs/api.md's tables, parsed here, so the doc is the one source."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spyre_devcluster.install import go_commands

API_MD = Path(__file__).parents[1] / "docs" / "api.md"
RESOURCES = {
    "SpyreModel": "spyremodels.v1alpha1.serving.spyre.dev",
    "SpyreCache": "spyrecaches.v1alpha1.serving.spyre.dev",
}
TABLES = {"SpyreModel": "phase", "SpyreCache": "SpyreCache phase"}  # their first header cell
FLUX = "Flux, kpt (kstatus)"


def reader() -> Path:
    """The kstatus program, built from its module the first time (a failure says why)."""
    return go_commands("kstatus", {"kstatus": "."})["kstatus"]


@dataclass(frozen=True)
class Kstatus:
    binary: Path
    kubeconfig: Path

    def __call__(self, kind: str, namespace: str, name: str) -> tuple[str, str]:
        """(status.phase, kstatus' status) of one live object, from one read."""
        command = [str(self.binary), "-kubeconfig", str(self.kubeconfig)]
        command += ["-namespace", namespace, RESOURCES[kind], name]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode != 0:
            raise AssertionError(f"{self.binary} failed: {result.stderr.strip()}")
        said = json.loads(result.stdout)
        return said["phase"], said["status"]


@dataclass(frozen=True)
class Documented:
    """One kind's table: each phase's kstatus once settled, and all it may read on the way
    (a `Ready`, rolling out row: InProgress before Current)."""

    settled: dict[str, str]
    allowed: dict[str, set[str]]


def documented(kind: str) -> Documented:
    """docs/api.md's table for `kind`: the one whose first header cell is TABLES[kind]."""
    rows = _table(API_MD.read_text(), TABLES[kind])
    settled: dict[str, str] = {}
    allowed: dict[str, set[str]] = {}
    for cells in rows:
        first = re.sub(r"\(.*?\)", "", cells[0])  # asides name reasons, not phases
        phases = re.findall(r"`(\w+)`", first)
        said = cells[-1]
        for phase in phases:
            allowed.setdefault(phase, set()).add(said)
            if re.fullmatch(r"[`\w, ]*", first.strip()):  # no qualifier: the settled state
                settled[phase] = said
    return Documented(settled, allowed)


def _table(text: str, first_header: str) -> list[list[str]]:
    """The body rows of the markdown table headed `| first_header | ... | FLUX |`."""
    lines = text.splitlines()
    for at, line in enumerate(lines):
        cells = _cells(line)
        if cells and cells[0] == first_header and cells[-1] == FLUX:
            body = []
            for row in lines[at + 2 :]:
                if not row.startswith("|"):
                    break
                body.append(_cells(row))
            return body
    raise AssertionError(f"{API_MD} has no table headed `| {first_header} | ... | {FLUX} |`")


def _cells(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
