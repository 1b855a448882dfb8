"""The package's layers, as docs/architecture.md draws them: who may import whom.

Read from the source (every import statement, top-level, inside a function or type-only), so a
lazy import across layers fails here too, and so does an import circle between two modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "langgraph_deadline"

# layer -> the layers it may import (itself always allowed). Public modules at the top level
# (`agents.py`, `http.py`, ...) re-export and may import any layer.
ALLOWED: dict[str, set[str]] = {
    "_core": set(),
    "_graph": {"_core"},
    "_retry": {"_core", "_graph"},
    "_tools": {"_core", "_graph", "_retry", "_learn"},  # a hedge asks a latency book
    "_agents": {"_core", "_graph", "_learn", "_retry", "_tools"},
    "_wire": {"_core"},
    "_instrument": {"_core", "_learn"},  # a backend exports what a latency book learned
    "_learn": {"_core"},
    "_report": {"_core", "_learn"},
    "testing": {"_core"},
    "_apps": {"_public", "_report", "testing"},  # the demo uses what users can import
}
FRAMEWORKS = ("langchain", "langgraph")


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if p.parent != PKG)


def _layer(path: Path) -> str:
    return path.relative_to(PKG).parts[0]


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute dotted name, line) of everything `path` imports."""
    rel = path.relative_to(PKG.parent).with_suffix("").parts
    package = rel[:-1]  # a module's package, and an __init__'s own package alike
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((name, node.lineno))
    return found


def _target_layer(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "langgraph_deadline":
        return None
    if len(parts) == 1:
        return "_public"
    head = parts[1]
    return head if head.startswith("_") or head == "testing" else "_public"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_each_module_imports_only_its_own_and_lower_layers(path: Path) -> None:
    layer = _layer(path)
    allowed = ALLOWED[layer] | {layer}
    wrong = [
        f"line {line}: {name}"
        for name, line in _imports(path)
        if (target := _target_layer(name)) is not None and target not in allowed
    ]
    assert not wrong, f"{layer} may import only {sorted(allowed)}: {wrong}"


@pytest.mark.parametrize(
    "path", [p for p in _modules() if _layer(p) == "_core"], ids=lambda p: p.name
)
def test_the_core_imports_neither_langchain_nor_langgraph(path: Path) -> None:
    wrong = [
        f"line {line}: {name}"
        for name, line in _imports(path)
        if (top := name.split(".")[0]) != "langgraph_deadline" and top.startswith(FRAMEWORKS)
    ]
    assert not wrong, wrong


def test_nothing_imports_langgraph_internals() -> None:
    wrong = [
        f"{p.relative_to(PKG)} line {line}: {name}"
        for p in PKG.rglob("*.py")
        for name, line in _imports(p)
        if name.startswith("langgraph._internal")
    ]
    assert not wrong, wrong


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path = PKG) -> dict[str, dict[str, int]]:
    """module -> {module of this package it imports: the line of the first such import}.

    Every import statement counts: top-level, inside a function, under `if TYPE_CHECKING:`.
    `from package import name` imports the submodule `package.name` when there is one, else the
    package itself (its `__init__`)."""
    paths = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[: len(package) - node.level + 1], *base.split(".")])
                    base = base.rstrip(".")
                names = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                    for alias in node.names
                ]
            else:
                continue
            for name in names:
                while name and name not in paths:  # `import a.b.c` of a name inside a module
                    name = name.rpartition(".")[0]
                if name and name != module:
                    edges.setdefault(name, node.lineno)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The groups of modules that import each other, directly or not (strongly connected
    components of more than one module, Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = {stack.pop()}
            while module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.append(frozenset(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _shown(group: frozenset[str], graph: dict[str, dict[str, int]]) -> str:
    """A group's modules and the imports that tie them, `a -> b (line n)`, to read the fix off."""
    short = {m: m.removeprefix("langgraph_deadline.") for m in group}
    ties = [
        f"{short[m]} -> {short[t]} (line {line})"
        for m in sorted(group)
        for t, line in sorted(graph[m].items())
        if t in group
    ]
    return f"{sorted(short.values())}: {'; '.join(ties)}"


def _group(*modules: str) -> frozenset[str]:
    return frozenset(f"langgraph_deadline.{m}" for m in modules)


# The import circles that are still there, each named by its modules (`_group(...)`), to be
# removed by putting each concept in one module (never by more lazy imports). None is left; the
# list only shrinks: a circle not listed here fails the test, and so does one listed that is gone.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def test_no_import_circle_between_modules() -> None:
    graph = _import_graph()
    circles = _cycles(graph)
    new = [_shown(group, graph) for group in circles if group not in KNOWN_CIRCLES]
    assert not new, "import circles (lazy and type-only imports count):\n" + "\n".join(new)
    gone = [sorted(group) for group in KNOWN_CIRCLES if group not in circles]
    assert not gone, f"no longer circles: remove them from KNOWN_CIRCLES: {gone}"


def test_the_circle_finder_counts_lazy_and_type_only_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from .sub import b\n",  # top-level, a submodule by `from package import`
        "sub/__init__.py": "",
        "sub/b.py": "def f():\n    from ..c import C\n",  # inside a function
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
        "d.py": "from . import c\n",  # imports into the circle, is not part of it
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = _import_graph(package)
    assert graph["pkg.sub.b"] == {"pkg.c": 2}
    assert _cycles(graph) == [frozenset({"pkg.a", "pkg.sub.b", "pkg.c"})]
    (package / "c.py").write_text("")
    assert _cycles(_import_graph(package)) == []


def test_one_module_builds_the_answer_of_a_tool_call_that_did_not_run_to_its_end() -> None:
    """The timeout, the stale answer and the closing of open calls are all `ToolMessage`s made
    in `_graph/answers.py`, from `ToolTimeout` facts made there too: no other module of the
    package constructs either."""
    builders = {
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id in ("ToolMessage", "ToolTimeout"))
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "ToolMessage")
        )
    }
    assert builders == {"_graph/answers.py"}
    # on the langchain-core floor (docs/architecture.md): no langgraph, no langchain
    frameworks = {
        top
        for name, _ in _imports(PKG / "_graph" / "answers.py")
        if (top := name.split(".")[0]) != "langgraph_deadline" and top.startswith(FRAMEWORKS)
    }
    assert frameworks == {"langchain_core"}


def test_every_layer_is_listed() -> None:
    layers = {p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert layers == set(ALLOWED)


def test_the_architecture_page_draws_these_rules() -> None:
    page = (PKG.parent / "docs" / "architecture.md").read_text()
    rows = [line.split("|")[1:-1] for line in page.splitlines() if line.startswith("| `")]
    documented = {
        cells[0].strip().strip("`"): {
            *re.findall(r"`([\w.]+)`", cells[-1]),
            *(["_public"] if "public modules" in cells[-1] else []),
        }
        for cells in rows
    }
    assert documented == ALLOWED
