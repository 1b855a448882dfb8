"""One timer per run for the instant its nodes end at.

Every node of a run whose budget is the run's own deadline (less its reserve and the hand-off)
ends at the same instant. Rather than one event-loop timer per node, the run keeps one for that
instant, armed on first use, and the nodes' cuts join it while they run.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cut import Cut

__all__ = ["RunAlarm"]


class RunAlarm:
    """Cancels the cuts that joined it, at one loop time; `close()` when the run ends."""

    __slots__ = ("_handle", "cuts", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.loop = loop
        self.cuts: set[Cut] = set()
        # In an empty context: the first node's (its config, LangGraph's task) would otherwise
        # be kept alive by the timer for the whole run.
        self._handle: asyncio.TimerHandle | None = loop.call_at(
            when, self._fire, context=contextvars.Context()
        )

    def _fire(self) -> None:
        self._handle = None
        for cut in list(self.cuts):
            cut.cancel()

    @property
    def fired(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Drop the timer (the run is over): it no longer keeps the run alive until then."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.cuts.clear()
