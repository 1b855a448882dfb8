"""A signature shown in the docs is the code's: each block marked
`<!-- signature: module.name -->` is a `def` whose parameters (names, kinds, defaults) and
return annotation must match `inspect.signature` of that object."""

from __future__ import annotations

import ast
import importlib
import inspect
from typing import Any

import pytest

from tests.test_docs_snippets import PAGES, ROOT, Block, blocks

SIGNATURES = [b for p in PAGES for b in blocks(p) if b.signature_of is not None]


def _documented(block: Block) -> tuple[list[tuple[str, str, Any]], str | None]:
    """(name, kind, default) of each parameter of the block's `def`, and its return annotation."""
    (func,) = ast.parse(block.code).body
    assert isinstance(func, ast.FunctionDef), "a signature block holds one def"
    a = func.args
    params: list[tuple[str, str, Any]] = []
    positional = [*a.posonlyargs, *a.args]
    defaults: list[Any] = [inspect.Parameter.empty] * (len(positional) - len(a.defaults))
    defaults += [_value(d) for d in a.defaults]
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        params.append((arg.arg, kind, default))
    if a.vararg is not None:
        params.append((a.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
    for arg, kw_default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        value = inspect.Parameter.empty if kw_default is None else _value(kw_default)
        params.append((arg.arg, "KEYWORD_ONLY", value))
    if a.kwarg is not None:
        params.append((a.kwarg.arg, "VAR_KEYWORD", inspect.Parameter.empty))
    returns = None if func.returns is None else ast.unparse(func.returns)
    return params, returns


def _value(node: ast.expr) -> Any:
    """A default as written: a literal, or a value of the package's (`Closing()`), made."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        import langgraph_deadline

        return eval(ast.unparse(node), vars(langgraph_deadline))  # the docs' own text


def _actual(dotted: str) -> tuple[list[tuple[str, str, Any]], str | None]:
    module, _, name = dotted.rpartition(".")
    sig = inspect.signature(getattr(importlib.import_module(module), name))
    params = [(p.name, p.kind.name, p.default) for p in sig.parameters.values()]
    ret = sig.return_annotation
    returns = None if ret is inspect.Signature.empty else getattr(ret, "__name__", str(ret))
    return params, returns


def test_the_docs_show_at_least_the_with_deadlines_signature() -> None:
    assert "langgraph_deadline.with_deadlines" in {b.signature_of for b in SIGNATURES}


@pytest.mark.parametrize(
    "block", SIGNATURES, ids=lambda b: f"{b.page.relative_to(ROOT)}:{b.line}:{b.signature_of}"
)
def test_a_documented_signature_is_the_codes(block: Block) -> None:
    assert block.signature_of is not None
    assert _documented(block) == _actual(block.signature_of)


def test_a_stale_signature_is_caught() -> None:
    stale = Block(
        ROOT / "docs" / "howto" / "wrap-a-graph.md",
        1,
        "def with_deadlines(graph, *, timeout=None) -> DeadlineGraph: ...",
        None,
        "langgraph_deadline.with_deadlines",
    )
    assert _documented(stale) != _actual("langgraph_deadline.with_deadlines")
