"""What the conformance tests share: comparing two runs' messages, ignoring ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage


def shape(messages: Sequence[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a run said, without ids or timings: type, text, tool calls (name, args), status."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        calls = (
            tuple((c["name"], tuple(sorted(c["args"].items()))) for c in m.tool_calls)
            if isinstance(m, AIMessage)
            else ()
        )
        status = m.status if isinstance(m, ToolMessage) else None
        out.append((type(m).__name__, m.text, calls, status, m.name))
    return out
