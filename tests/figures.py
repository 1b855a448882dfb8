"""The house's figures (#49), measured from the code and from one profiled run.

`python -m tests.figures` prints them; `tests/test_figures.py` holds them to their ceilings, and
docs/architecture.md ("The figures") quotes those ceilings.

- **keywords**: the keyword options each public entry point takes (the parameters after `*`; the
  object it wraps is not one, nor the `**` of a host's own options typed with `Unpack`:
  `ToolArgs`, LangChain's `@tool`'s; `CompileArgs`, LangGraph's `compile()`'s).
- **long functions**: functions whose code (docstring left out) is over 60 lines.
- **twins**: a sync/async pair, `name` and `aname` in one module or class.
- **outside**: functions standing outside the class they serve: a module-level function whose
  first parameter is the run (`RunTracker`, `GraphRun`, `Run`) or the graph (`DeadlineRuns`)
  and that reads or writes it, a method written outside its class.
- **the ordinary run**: a capped node calling httpx through `deadline_hooks()`, then a
  `ToolNode` calling a `deadline_tool` that calls httpx, run once warm under a profiler: the
  package's modules it executes, their lines, and those lines over the lines of the functions
  that ran.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from tests import test_public_api as _public

PKG = Path(__file__).resolve().parents[1] / "langgraph_deadline"

PUBLIC_MODULES = tuple(m for m in _public.PUBLIC_MODULES if m != "langgraph_deadline.types")
"""The modules users import from (`.types` holds only what they annotate with)."""

RECORDS = frozenset({"StepRecord", "Outcome", "ChatReply", "ServedChatRequest", "ServedRequest"})
"""Values the package hands out or a test describes, field by field: not entry points."""


def keywords() -> dict[str, int]:
    """`module.name` -> how many keyword options it takes, for every public callable."""
    counts: dict[str, int] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if name in RECORDS or not callable(obj):
                continue
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError):
                continue
            counts[f"{module_name}.{name}"] = sum(
                1
                for p in sig.parameters.values()
                if p.kind is p.KEYWORD_ONLY and not p.name.startswith("_")
            )
    return counts


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _code_lines(f: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    assert f.end_lineno is not None
    lines = f.end_lineno - f.lineno + 1
    first = f.body[0]
    docstring = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    if docstring and first.end_lineno is not None:
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(limit: int = 60) -> dict[str, int]:
    """`path:function` -> its code lines, for every function whose code is over `limit`."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        for f in _functions(ast.parse(path.read_text())):
            if (n := _code_lines(f)) > limit:
                found[f"{path.relative_to(PKG)}:{f.name}"] = n
    return found


def twins() -> list[str]:
    """`path:name/aname` of every sync/async pair."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        scopes: list[ast.Module | ast.ClassDef] = [tree]
        scopes += [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]
        for scope in scopes:
            names = {
                f.name for f in scope.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            for name in sorted(names):
                bare = name.lstrip("_")
                lead = name[: len(name) - len(bare)]
                if bare.startswith("a") and lead + bare[1:] in names:
                    found.append(f"{path.relative_to(PKG)}:{lead + bare[1:]}/{name}")
    return found


RUN_CLASSES = frozenset({"RunTracker", "GraphRun", "Run", "DeadlineRuns"})
"""The run's classes and the graph's: the objects a run's functions belong to."""


def _standing_outside(tree: ast.Module) -> list[str]:
    """The module-level functions of `tree` whose first parameter is one of `RUN_CLASSES` (by
    name, quoted or not) and that read or write it."""
    found = []
    for f in tree.body:
        if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) or not f.args.args:
            continue
        first = f.args.args[0]
        kind = first.annotation
        name = kind.id if isinstance(kind, ast.Name) else getattr(kind, "value", None)
        if name not in RUN_CLASSES:
            continue
        uses = (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == first.arg
            for n in ast.walk(f)
        )
        if any(uses):
            found.append(f.name)
    return found


def outside() -> list[str]:
    """`path:function` of every function standing outside the run's or the graph's class."""
    return [
        f"{path.relative_to(PKG)}:{name}"
        for path in sorted(PKG.rglob("*.py"))
        for name in _standing_outside(ast.parse(path.read_text()))
    ]


@dataclass(frozen=True)
class Run:
    """What the ordinary run executes of the package."""

    modules: dict[str, int]  # module (relative path) -> its lines
    function_lines: int  # the lines of the functions that ran
    functions: list[str]  # `path:name` of each function that ran

    @property
    def lines(self) -> int:
        return sum(self.modules.values())

    @property
    def ratio(self) -> float:
        return self.lines / self.function_lines


async def _ordinary_run() -> set[CodeType]:
    import httpx
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from langgraph_deadline import DeadlineState, deadline_tool, with_deadlines
    from langgraph_deadline.http import deadline_hooks
    from langgraph_deadline.testing import SlowServer

    class State(MessagesState, DeadlineState):
        pass

    codes: set[CodeType] = set()
    root = str(PKG)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            codes.add(frame.f_code)

    with SlowServer() as server:
        url = server.url("/slow?delay=0")
        async with httpx.AsyncClient(event_hooks=deadline_hooks()) as client:

            @deadline_tool(cap=2.0)
            async def fetch(query: str) -> str:
                """Fetch a page."""
                return (await client.get(url)).text

            async def plan(state: State) -> dict[str, Any]:
                await client.get(url)
                call = {"name": "fetch", "args": {"query": "x"}, "id": "c1"}
                return {"messages": [AIMessage("", tool_calls=[call])]}

            builder = StateGraph(State)
            builder.add_node("plan", plan)
            builder.add_node("tools", ToolNode([fetch]))
            builder.add_edge(START, "plan")
            builder.add_edge("plan", "tools")
            builder.add_edge("tools", END)
            graph = with_deadlines(builder, timeout=5.0, caps={"plan": 2.0})
            ask = {"messages": [("user", "hi")]}
            await graph.ainvoke(ask)  # warm: first-use paths are not the ordinary run's
            threading.setprofile(profile)
            sys.setprofile(profile)
            try:
                out = await graph.ainvoke(ask)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)  # type: ignore[arg-type]
    assert out["deadline_outcome"].terminal.value == "completed", out["deadline_outcome"]
    return codes


def ordinary_run() -> Run:
    """Profile the ordinary run (in this process: run it in a fresh one, as the test does)."""
    codes = asyncio.run(_ordinary_run())
    by_file: dict[str, set[int]] = {}
    for code in codes:
        by_file.setdefault(code.co_filename, set()).add(code.co_firstlineno)
    modules, function_lines, functions = {}, 0, []
    for filename, starts in by_file.items():
        path = Path(filename)
        text = path.read_text()
        rel = str(path.relative_to(PKG))
        modules[rel] = len(text.splitlines())
        for f in _functions(ast.parse(text)):
            first = min([f.lineno, *(d.lineno for d in f.decorator_list)])
            if f.lineno in starts or first in starts:
                assert f.end_lineno is not None
                function_lines += f.end_lineno - f.lineno + 1
                functions.append(f"{rel}:{f.name}")
    return Run(modules, function_lines, sorted(functions))


if __name__ == "__main__":
    run = ordinary_run()
    print(json.dumps({**asdict(run), "lines": run.lines, "ratio": round(run.ratio, 2)}))
