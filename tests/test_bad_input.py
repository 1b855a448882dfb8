"""Bad input to the public entry points fails at once, with an error naming what is wrong: not
later, at the first request or when a timeout fires, and never read as something else."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph

from langgraph_deadline import (
    Deadline,
    DeadlineState,
    budgeted,
    budgeted_model,
    deadline_scope,
    deadline_tool,
    deadline_tools,
    terminal_of,
    with_deadlines,
)
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.asgi import DeadlineASGIMiddleware
from langgraph_deadline.http import from_headers
from langgraph_deadline.learn import LatencyBook, learned


class State(DeadlineState):
    log: Annotated[list[str], operator.add]


def _builder() -> StateGraph[Any, Any, Any, Any]:
    b = StateGraph(State)
    b.add_node("a", lambda s: {"log": ["a"]})
    b.add_edge(START, "a")
    return b


async def _asgi_app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI app that is never called: the middleware is refused first."""


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return query


CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    (
        "a reserve that takes the whole timeout",
        lambda: with_deadlines(_builder(), timeout=1.0, reserve=2.0),
        ValueError,
        "reserve",
    ),
    (
        "a node that needs more than the timeout",
        lambda: with_deadlines(_builder(), timeout=1.0, min_viable={"a": 5.0}),
        ValueError,
        "min_viable",
    ),
    (
        "caps that are not a mapping",
        lambda: with_deadlines(_builder(), caps=[1]),  # type: ignore[arg-type]
        TypeError,
        "caps must be a mapping",
    ),
    (
        "budgeted min_viable above its cap",
        lambda: budgeted(lambda s: s, cap=1.0, min_viable=5.0),
        ValueError,
        r"min_viable \(5 s\) is more than cap \(1 s\)",
    ),
    ("budgeted name not a string", lambda: budgeted(lambda s: s, name=5), TypeError, "name"),  # type: ignore[call-overload]
    (
        "read_only as a string",
        lambda: deadline_tool(lookup, cap=1.0, read_only="no"),  # type: ignore[call-overload]
        TypeError,
        "read_only",
    ),
    (
        "side_effect as a string",
        lambda: deadline_tool(lookup, cap=1.0, side_effect="no"),  # type: ignore[call-overload]
        TypeError,
        "side_effect",
    ),
    (
        "a timeout message with a placeholder it cannot fill",
        lambda: deadline_tool(lookup, cap=1.0, message="{nope}"),
        ValueError,
        "cannot be filled",
    ),
    (
        "a tool that needs more than its timeout",
        lambda: deadline_tool(lookup, cap=1.0, min_viable=5.0),
        ValueError,
        "min_viable",
    ),
    (
        "a cache namespace that is neither a string nor a function",
        lambda: deadline_tool(lookup, cap=1.0, cache_namespace=5),  # type: ignore[call-overload]
        TypeError,
        "cache_namespace",
    ),
    (
        "deadline_tools' read_only as one string",
        lambda: deadline_tools([lookup], read_only="lookup"),
        TypeError,
        "read_only",
    ),
    (
        "a Deadline built from NaN readings",
        lambda: Deadline(monotonic=math.nan, wall=math.nan),
        ValueError,
        "monotonic must be a finite number",
    ),
    (
        "an ASGI reserve that takes the whole max_timeout",
        lambda: DeadlineASGIMiddleware(_asgi_app, max_timeout=1.0, reserve=2.0),
        ValueError,
        "reserve .* must be less than max_timeout",
    ),
    (
        "an ASGI reserve that takes the whole default_timeout",
        lambda: DeadlineASGIMiddleware(
            _asgi_app, max_timeout=10.0, default_timeout=1.0, reserve=1.0
        ),
        ValueError,
        "reserve .* must be less than default_timeout",
    ),
    (
        "deadline_tools' default negative",
        lambda: deadline_tools([lookup], default_cap=-1),
        ValueError,
        r"^default_cap must be >= 0 seconds",
    ),
    (
        "deadline_tools' cap negative",
        lambda: deadline_tools([lookup], caps={"lookup": -1}),
        ValueError,
        r"^caps\['lookup'\] must be >= 0 seconds",
    ),
    (
        "deadline_tools' default a string, with no tools",
        lambda: deadline_tools([], default_cap="x"),  # type: ignore[arg-type]
        TypeError,
        "^default_cap must be a number of seconds",
    ),
    (
        "deadline_tools' cap NaN, with no tools",
        lambda: deadline_tools([], caps={"lookup": math.nan}),
        ValueError,
        r"^caps\['lookup'\] must be a finite number",
    ),
    (
        "deadline_tools' cache not a cache, with no tools",
        lambda: deadline_tools([], cache=5),  # type: ignore[arg-type]
        TypeError,
        "^cache must be a StaleCache",
    ),
    (
        "deadline_tools' cache namespace a number, with no tools",
        lambda: deadline_tools([], cache_namespace=5),  # type: ignore[arg-type]
        TypeError,
        "^cache_namespace must be",
    ),
    (
        "deadline_tools given one tool, not a list",
        lambda: deadline_tools(lookup),  # type: ignore[arg-type]
        TypeError,
        "^tools must be a list",
    ),
    (
        "deadline_tools given a number among the tools",
        lambda: deadline_tools([lookup, 5]),  # type: ignore[list-item]
        TypeError,
        r"^tools\[1\] must be a tool or a function",
    ),
    (
        "deadline_tool of a number",
        lambda: deadline_tool(5),  # type: ignore[call-overload]
        TypeError,
        "^deadline_tool takes a function, an existing tool",
    ),
    (
        "deadline_tool with a runnable that is not one",
        lambda: deadline_tool("lookup", 5),  # type: ignore[call-overload]
        TypeError,
        "^deadline_tool's runnable must be a Runnable",
    ),
    (
        "a malformed deadline header of ours beside a header that is not ours",
        lambda: from_headers({"x-€": "1", "X-Request-Timeout-Ms": "5€"}),
        ValueError,
        "x-request-timeout-ms",
    ),
    ("terminal_of a string", lambda: terminal_of("x"), TypeError, "terminal_of"),  # type: ignore[arg-type]
    ("a scope name that is not a string", lambda: deadline_scope(1.0, name=5), TypeError, "name"),  # type: ignore[arg-type]
    (
        "a middleware reserve that takes the whole timeout",
        lambda: DeadlineMiddleware(timeout=1.0, reserve=2.0),
        ValueError,
        "reserve",
    ),
    (
        "a model call that needs more than the timeout",
        lambda: DeadlineMiddleware(timeout=1.0, model_limits=ModelLimits(min_viable=5.0)),
        ValueError,
        "model_limits.min_viable",
    ),
    (
        "a model min_viable above the model cap",
        lambda: DeadlineMiddleware(model_limits=ModelLimits(cap=1.0, min_viable=5.0)),
        ValueError,
        r"min_viable \(5.0 s\) is more than cap \(1.0 s\)",
    ),
    (
        "tool caps that are not a mapping",
        lambda: DeadlineMiddleware(tool_caps=[("x", 1)]),  # type: ignore[arg-type]
        TypeError,
        "tool_caps",
    ),
    (
        "an empty list of fallback models",
        lambda: DeadlineMiddleware(fallbacks=[]),
        ValueError,
        "fallbacks",
    ),
    (
        "a fallback model that is a model's name, not a model",
        lambda: DeadlineMiddleware(fallbacks=["gpt-4o-mini"]),  # type: ignore[list-item]
        TypeError,
        r"fallbacks\[0\]",
    ),
    # Settings under which a step could never run: refused, naming the arguments.
    (
        "a node's min_viable above its own cap",
        lambda: with_deadlines(_builder(), caps={"a": 1}, min_viable={"a": 2}),
        ValueError,
        r"min_viable\['a'\] \(2 s\) is more than caps\['a'\] \(1 s\): it could never start",
    ),
    (
        "a node's min_viable above default_cap",
        lambda: with_deadlines(_builder(), default_cap=1, min_viable={"a": 2}),
        ValueError,
        r"min_viable\['a'\] \(2 s\) is more than default_cap \(1 s\)",
    ),
    (
        "a node's min_viable that fits the timeout, but not with the reserve",
        lambda: with_deadlines(_builder(), timeout=1.0, reserve=0.5, min_viable={"a": 0.8}),
        ValueError,
        r"^min_viable\['a'\] \(0.8 s\) plus reserve \(0.5 s\) is more than timeout \(1 s\)",
    ),
    (
        "a node's min_viable above the timeout, no reserve",
        lambda: with_deadlines(_builder(), timeout=1.0, min_viable={"a": 2}),
        ValueError,
        r"^min_viable\['a'\] \(2 s\) is more than timeout \(1 s\): it could never start",
    ),
    (
        "the middleware's model min_viable that fits the timeout, but not with the reserve",
        lambda: DeadlineMiddleware(
            timeout=1.0, reserve=0.5, model_limits=ModelLimits(min_viable=0.8)
        ),
        ValueError,
        r"^model_limits.min_viable \(0.8 s\) plus reserve \(0.5 s\) is more than timeout \(1 s\)",
    ),
    (
        "a node capped at 0",
        lambda: with_deadlines(_builder(), caps={"a": 0}),
        ValueError,
        r"^caps\['a'\] must be more than 0 seconds",
    ),
    (
        "default_cap 0",
        lambda: with_deadlines(_builder(), default_cap=0.0),
        ValueError,
        "^default_cap must be more than 0 seconds",
    ),
    (
        "budgeted capped at 0",
        lambda: budgeted(lambda s: s, cap=0),
        ValueError,
        "^cap must be more than 0 seconds",
    ),
    (
        "a tool with a cap of 0",
        lambda: deadline_tool(lookup, cap=0),
        ValueError,
        "^cap must be more than 0 seconds, got 0: a step capped at 0 s never starts",
    ),
    (
        "a model capped at 0",
        lambda: budgeted_model(FakeListChatModel(responses=["x"]), cap=0),
        ValueError,
        "^cap must be more than 0 seconds, got 0: a step capped at 0 s never starts",
    ),
    (
        "deadline_tools' cap 0",
        lambda: deadline_tools([lookup], caps={"lookup": 0}),
        ValueError,
        r"^caps\['lookup'\] must be more than 0 seconds",
    ),
    (
        "learned with min_samples 0",
        lambda: learned(LatencyBook(listen=False), min_samples=0),
        ValueError,
        "^min_samples must be >= 1",
    ),
    (
        "learned with a cap of 0",
        lambda: learned(LatencyBook(listen=False), cap=0),
        ValueError,
        "^cap must be more than 0 seconds",
    ),
]


@pytest.mark.parametrize(("case", "call", "error", "says"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_at_construction_naming_the_argument(
    case: str, call: Callable[[], Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        call()


def test_a_remaining_placeholder_renders_even_with_no_deadline() -> None:
    tool_ = deadline_tool(lookup, cap=1.0, message="{tool}: {remaining:.1f} s left")
    assert tool_.name == "lookup"
