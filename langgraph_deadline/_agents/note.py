"""The budget note (opt-in): a line added to a model call's system message saying how many
seconds the run has left and what the tools it may call usually take, so the model can plan
fewer calls when time is short. Its words live here, in one place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from langchain.agents.middleware import ModelRequest

from .._learn.book import LatencyBook
from .provider import noted

__all__ = ["NOTE_QUANTILE", "budget_note", "tool_times", "with_note"]

NOTE_QUANTILE: Final = 0.9
"""The tools' times the note gives: 9 calls in 10 take at most that."""

_NOTE: Final = "Time left for this request: {left:.1f} s."
_TOOLS: Final = " Tool calls usually take (9 in 10 within): {items}."
_ADVICE: Final = (
    " When time is short, make fewer tool calls and answer with what you have before it runs out."
)


def budget_note(left: float, tools: Sequence[tuple[str, float]] = ()) -> str:
    """The note's text: `left` seconds, and each tool's learned time (name, seconds)."""
    text = _NOTE.format(left=max(left, 0.0))
    if tools:
        text += _TOOLS.format(items=", ".join(f"{name} {s:.1f} s" for name, s in tools))
    return text + _ADVICE


def tool_times(
    book: LatencyBook | None, tools: Sequence[Any], *, min_samples: int
) -> list[tuple[str, float]]:
    """The learned `NOTE_QUANTILE` of each tool the model may call (by name), for those with
    `min_samples` samples in `book` (a quantile among cut calls: at least that)."""
    if book is None:
        return []
    times = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else getattr(tool, "name", None)
        if not isinstance(name, str) or book.count(name, "tool") < max(1, min_samples):
            continue
        est = book.sketch(name, "tool").quantile(NOTE_QUANTILE)
        if est is not None:
            times.append((name, est.seconds))
    return times


def with_note(request: ModelRequest[Any], note: str) -> ModelRequest[Any]:
    """`request` with `note` at the end of its system message (a new one if it has none)."""
    return request.override(system_message=noted(request.system_message, note))
