"""The layout a newcomer reads: the README's map names every package and module of the
operator and every folder of the repository, and nothing that is gone, no module of the
operator is over 400 lines (none kept under by `# fmt: skip`), and the operator's process
loads nothing of the dev cluster (the image has none; test_layers.py: no module of the
operator imports it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "src" / "spyre_operator"


def readme_map() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"## Layout\n\n```\n(.*?)```", text, re.S)
    assert found, "README.md has no Layout block"
    return found.group(1)


def test_the_readme_map_names_every_package_and_only_those() -> None:
    block = readme_map()
    named = set(re.findall(r"src/spyre_operator/(\w+)/", block))
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert named == packages
    modules = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert set(re.findall(r"src/spyre_operator/(\w+\.py)", block)) == modules
    folders = set(re.findall(r"^(\w[\w-]*)/", block, re.M))
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert folders == {p.split("/")[0] for p in tracked if "/" in p and p[0] != "."}


def test_no_module_of_the_operator_is_over_400_lines_nor_squeezed_to_fit() -> None:
    modules = {str(p.relative_to(PACKAGE)): p.read_text() for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, text in modules.items() if (n := len(text.splitlines())) > 400}
    assert long == {}
    assert [name for name, text in modules.items() if "fmt: skip" in text] == []


def test_the_operator_process_loads_nothing_of_the_dev_cluster(tmp_path: Path) -> None:
    """`run` from a venv that has the dev cluster: its process imports none of it (~10 MB
    of RSS the image has not), while the other commands offer `cluster` and `dev`."""
    script = (
        "import sys\n"
        "from spyre_operator.cli import build_parser, main\n"
        f"main(['run', '--kubeconfig', {str(tmp_path / 'none')!r}])\n"
        "print(sorted(m for m in sys.modules if m.startswith('spyre_devcluster')))\n"
        "print('cluster' in build_parser()._subparsers._group_actions[0].choices)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True"], done.stderr
