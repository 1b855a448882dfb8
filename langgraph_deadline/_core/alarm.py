"""One timer per run for the instant its nodes end at.

Every node of a run whose budget is the run's own deadline (less its reserve and the hand-off)
ends at the same instant. Rather than one event-loop timer per node, the run keeps one for that
instant, armed on first use, and the nodes' cuts join it while they run.
"""

from __future__ import annotations

import asyncio

from .cut import Cut, Due
from .deadline import Deadline

__all__ = ["RunAlarm"]


class RunAlarm:
    """Cancels the cuts that joined it, once its deadline has passed; `close()` when the run
    ends."""

    __slots__ = ("_due", "cuts", "fired", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: Deadline) -> None:
        self.loop = loop
        self.cuts: set[Cut] = set()
        self.fired = False
        # Armed inside the run's first node, in an empty context (`Due`): that node's context
        # would otherwise stay alive with the timer for the whole run.
        self._due: Due | None = Due(loop, deadline, self._fire)

    def _fire(self) -> None:
        self.fired = True
        self._due = None
        for cut in list(self.cuts):
            cut.cancel()

    def close(self) -> None:
        """Drop the timer (the run is over): it no longer keeps the run alive until then."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        self.cuts.clear()
