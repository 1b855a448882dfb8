"""deadline_tool and deadline_tools: what the model sees is kept, bad options get clear errors."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.tools import tool

from langgraph_deadline import (
    InMemoryStaleCache,
    deadline_tool,
    deadline_tools,
)


def test_wrapping_an_existing_tool_keeps_what_the_model_sees() -> None:
    @tool
    def search(query: str, limit: int = 5) -> str:
        """Search the knowledge base."""
        return query * limit

    wrapped = deadline_tool(search, cap=3)
    assert wrapped.name == search.name
    assert wrapped.description == search.description
    assert (
        wrapped.tool_call_schema.model_json_schema() == search.tool_call_schema.model_json_schema()
    )
    assert wrapped.invoke({"query": "a", "limit": 2}) == "aa"

    @deadline_tool("renamed", cap=1)
    def other(x: int) -> int:
        """Other."""
        return x + 1

    assert other.name == "renamed" and other.invoke({"x": 1}) == 1 + 1


def test_caps_table_and_bad_input_get_clear_errors() -> None:
    def search_docs(q: str) -> str:
        """Docs."""
        return q

    def get_order(order_id: str) -> str:
        """Order."""
        return order_id

    wrapped = deadline_tools([search_docs, get_order], caps={"search_docs": 5}, default_cap=3)
    assert {t.name: t.options.cap for t in wrapped} == {"search_docs": 5, "get_order": 3}
    with pytest.raises(ValueError, match="unknown tools"):
        deadline_tools([search_docs], caps={"nope": 1})
    with pytest.raises(ValueError, match="cap"):
        deadline_tool(search_docs, cap=-1)
    with pytest.raises(ValueError, match="read_only"):
        deadline_tool(search_docs, cache=InMemoryStaleCache())
    with pytest.raises(ValueError, match="max_entries"):
        InMemoryStaleCache(max_entries=0)

    class Opaque:
        pass

    @deadline_tool(cap=1, read_only=True, cache=InMemoryStaleCache())
    def takes_anything(x: Any) -> str:
        """Anything."""
        return "ok"

    with pytest.raises(TypeError, match="not JSON-serializable"):
        takes_anything.invoke(
            {"type": "tool_call", "id": "c", "name": "takes_anything", "args": {"x": Opaque()}},
            {"configurable": {"thread_id": "t"}},
        )


def test_a_tools_limit_is_its_cap_and_the_old_names_are_gone() -> None:
    """`cap=` everywhere a step's limit goes (`timeout` is a run's total), `default_cap=` for a
    table's rest: nothing is released, so the old names are refused, not warned about."""

    def lookup(q: str) -> str:
        """Look something up."""
        return q

    assert deadline_tool(lookup, cap=2.0).options.cap == 2.0
    with pytest.raises(TypeError, match="timeout"):
        deadline_tool(lookup, timeout=2.0)  # type: ignore[call-overload]
    assert not hasattr(deadline_tool(lookup, cap=2.0), "timeout")
    (one,) = deadline_tools([lookup], default_cap=3.0)
    assert one.options.cap == 3.0
    with pytest.raises(TypeError, match="default"):
        deadline_tools([lookup], default=3.0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="default_cap"):
        deadline_tools([lookup], default_cap=-1)
