"""One timer per run for the instant its nodes end at.

Every node of a run whose budget is the run's own deadline (less its reserve and the hand-off)
ends at the same instant. Rather than one event-loop timer per node, the run keeps one for that
instant, armed on first use; the nodes' cuts join it while they run. They are registered with
the run's cancel signal anyway, so the alarm finds them there and keeps no set of its own. A
run that `ainvoke` started arms it at once, and it goes on to the run's backstop: one timer
for both instants. The backstop waits, up to the cuts' `GRACE`, while a step already cut is
still winding down: its cancellation would be that step's second one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .cancel import CancelSignal
from .cut import GRACE, Cut, Due
from .deadline import Deadline
from .plan import HANDOFF

__all__ = ["RunAlarm"]

_POLL = 0.005  # seconds between looks at the steps winding down, before the backstop


class RunAlarm:
    """Cancels the cuts registered with `signal` that joined it (`Cut.joined`), once its
    deadline has passed; then, given `then` (a later deadline, a callback and its arguments:
    the run's backstop), calls the callback at that deadline. `close()` when the run ends."""

    __slots__ = ("_backstop_at", "_due", "_then", "fired", "loop", "signal")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deadline: Deadline,
        signal: CancelSignal,
        then: tuple[Deadline, Callable[..., object], *tuple[object, ...]] | None = None,
    ) -> None:
        self.loop = loop
        self.signal = signal
        self.fired = False
        self._then = then
        self._backstop_at: float | None = None
        # In an empty context (`Due`): armed inside the run's first node, that node's context
        # would otherwise stay alive with the timer for the whole run.
        self._due: Due | asyncio.TimerHandle | None = Due(loop, deadline, self._fire)

    def _fire(self) -> None:
        self.fired = True
        then = self._then
        cuts = self.joined()
        if then is None:
            self._due = None
        else:
            # The steps cut now get the hand-off to deliver their answers before the backstop,
            # also when the loop stalled past both instants and this timer comes late: the run
            # ends the same way whichever timer the stall let through first.
            at = then[0]
            if cuts:
                at = max(at, Deadline._after(HANDOFF, at.clock))
            self._due = Due(self.loop, at, self._backstop)
        for cut in cuts:
            cut.cancel()

    def _backstop(self) -> None:
        """The run's own deadline: call the backstop, once no step of the run that was cut is
        still winding down (cancelled again in its clean-up, psycopg closes the connection of
        a query it is cancelling in the server), or once `GRACE` has passed."""
        now = self.loop.time()
        if self._backstop_at is None:
            self._backstop_at = now
        if now - self._backstop_at < GRACE and any(
            isinstance(s, Cut) and s.fired for s in self.signal.registered()
        ):
            self._due = self.loop.call_later(_POLL, self._backstop)
            return
        then, self._then, self._due = self._then, None, None
        if then is not None:
            then[1](*then[2:])

    def joined(self) -> list[Cut]:
        """The cuts on this timer now."""
        return [s for s in self.signal.registered() if isinstance(s, Cut) and s.joined]

    def close(self) -> None:
        """Drop the timer (the run is over): it no longer keeps the run alive until then."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
