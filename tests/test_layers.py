"""The package's layers, as docs/architecture.md draws them: who may import whom.

Read from the source (every import statement, top-level or inside a function), so a lazy import
across layers fails here too.
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


def test_no_module_is_over_400_lines_and_long_ones_say_why() -> None:
    for p in PKG.rglob("*.py"):
        lines = p.read_text().count("\n")
        assert lines <= 400, f"{p.relative_to(PKG)}: {lines} lines"
        if lines > 300:
            doc = ast.get_docstring(ast.parse(p.read_text())) or ""
            assert "One module because" in doc, f"{p.relative_to(PKG)}: {lines} lines, no reason"


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
