"""The operator's layers import one way only (the order is docs/operator.md's, "Layers"),
and neither the operator's modules nor the runtime's import each other in a circle.

Every import counts: at the top, inside a function, under TYPE_CHECKING."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator/src/spyre_operator"
RUNTIME = ROOT / "image/src/spyre_runtime"
DOC = ROOT / "docs/operator.md"
# Below every layer: the package's own __init__ (the version) and the runtime's contract.
BELOW = ("spyre_runtime",)
FORBIDDEN = {"spyre_operator": ("spyre_devcluster",), "spyre_runtime": ("spyre_operator",)}

Imports = dict[str, list[tuple[int, str]]]  # module -> (line, module it imports)


def layers() -> list[str]:
    """The order docs/operator.md writes down: `a` -> `b` -> ..., lowest first."""
    found = re.search(r"^Layers, lowest first: (.+)$", DOC.read_text(), re.MULTILINE)
    assert found, f"{DOC}: no line 'Layers, lowest first: `api` -> ...'"
    return re.findall(r"`([\w.]+)`", found.group(1))


def module_name(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    return {module_name(package, p): p for p in sorted(package.rglob("*.py"))}


def imports(package: Path) -> Imports:
    """Each module's imports of the project's packages (a `from X import Y` of a module Y
    is an import of X.Y)."""
    known = modules(package)
    ours = (package.name, *BELOW, *FORBIDDEN[package.name])
    out: Imports = {}
    for name, path in known.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _targets(node, here):
                if target.split(".")[0] not in ours:
                    continue
                found.append((node.lineno, target))
        out[name] = found
    return out


def _targets(node: ast.Import | ast.ImportFrom, here: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    else:
        base = node.module or ""
        if node.level:
            parent = here.split(".")[: len(here.split(".")) - node.level + 1]
            base = ".".join([*parent, *([node.module] if node.module else [])])
        for alias in node.names:
            yield f"{base}.{alias.name}"  # resolved below: a module, or a name in `base`


def resolve(target: str, known: dict[str, Path]) -> str:
    """`target` as a module: itself, or the module it names a member of."""
    while target not in known and "." in target:
        target = target.rpartition(".")[0]
    return target


def layer_of(module: str, order: list[str]) -> int:
    """The layer's index; -1 below them all (the package's __init__, the runtime)."""
    parts = module.split(".")
    if parts[0] != "spyre_operator" or len(parts) == 1:
        return -1
    return order.index(parts[1])


def upward(package: Path, order: list[str]) -> list[str]:
    """Every import of a module from a higher layer, or of a forbidden package."""
    known = modules(package)
    problems = []
    for name, found in imports(package).items():
        where = known[name].relative_to(package.parent)
        for line, raw in found:
            target = resolve(raw, known)
            if target.split(".")[0] in FORBIDDEN[package.name]:
                problems.append(f"{where}:{line} imports {target}: {package.name} never may")
            elif package.name == "spyre_operator" and target.startswith("spyre_operator"):
                mine, theirs = layer_of(name, order), layer_of(target, order)
                if theirs > mine:
                    allowed = ", ".join(order[: mine + 1])
                    problems.append(
                        f"{where}:{line} imports {target}, a higher layer: "
                        f"{order[mine]} may import only {allowed} (docs/operator.md, Layers)"
                    )
    return problems


def cycles(package: Path) -> list[list[str]]:
    """The circles among the package's modules (strongly connected components of more
    than one module, or a module importing itself)."""
    known = modules(package)
    graph = {
        name: {t for t in (resolve(raw, known) for _, raw in found) if t in known}
        for name, found in imports(package).items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                out.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return out


def test_every_package_of_the_operator_has_a_layer() -> None:
    order = layers()
    tops = {name.split(".")[1] for name in modules(OPERATOR) if "." in name}
    assert tops - set(order) == set(), "add them to docs/operator.md, Layers"
    assert set(order) - tops == set(), "docs/operator.md, Layers, names what does not exist"


def test_the_operator_imports_one_way() -> None:
    assert upward(OPERATOR, layers()) == []


@pytest.mark.parametrize("package", [OPERATOR, RUNTIME], ids=lambda p: p.name)
def test_no_module_imports_itself_in_a_circle(package: Path) -> None:
    assert cycles(package) == []


def test_the_runtime_imports_nothing_of_the_operator() -> None:
    assert upward(RUNTIME, layers()) == []


def test_the_check_sees_an_upward_import_and_a_circle(tmp_path: Path) -> None:
    """The checks themselves, on a package made for it: render importing reconcile
    (upward), and two modules importing each other from inside functions."""
    package = tmp_path / "spyre_operator"
    for folder in ("render", "reconcile"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "render/pod.py").write_text(
        "def f():\n    from spyre_operator.reconcile.decide import decide\n"
    )
    (package / "reconcile/decide.py").write_text("def decide():\n    from ..render import pod\n")
    assert upward(package, ["render", "reconcile"]) == [
        "spyre_operator/render/pod.py:2 imports spyre_operator.reconcile.decide, a higher "
        "layer: render may import only render (docs/operator.md, Layers)"
    ]
    assert cycles(package) == [["spyre_operator.reconcile.decide", "spyre_operator.render.pod"]]
