"""What both services share: serving an ASGI app on loopback, and running a graph per request."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import uvicorn
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from langgraph_deadline import (
    DeadlineExceeded,
    Terminal,
    current_deadline,
    terminal_of,
)
from langgraph_deadline.types import DeadlineGraph

__all__ = ["RunReport", "Served", "run_graph"]


@dataclasses.dataclass(frozen=True, slots=True)
class RunReport:
    """How one graph run behind a request ended, as the service saw it (`time.monotonic()`)."""

    terminal: Terminal
    step: str | None
    budget: float | None  # seconds the request had when the run started; None: no deadline
    started: float
    ended: float


async def run_graph(
    graph: DeadlineGraph,
    payload: Mapping[str, Any] | Command[Any],
    reports: list[RunReport],
    *,
    config: RunnableConfig | None = None,
) -> dict[str, Any]:
    """Run `graph` under the request's deadline (it is in context: nothing to pass) and report.

    A run that ran out of time raises `DeadlineExceeded`, which `DeadlineASGIMiddleware` turns
    into a 504 naming the step; a cancelled run (the client left) re-raises its cancellation;
    an interrupted run returns its state, and is reported when it ends.
    """
    d = current_deadline()
    started = time.monotonic()
    budget = d.remaining() if d is not None else None
    try:
        given = payload if isinstance(payload, Command) else dict(payload)
        out: dict[str, Any] = await graph.ainvoke(given, config)
    except BaseException as exc:
        step = exc.step if isinstance(exc, DeadlineExceeded) else None
        ended = terminal_of(exc) or Terminal.FAILED
        reports.append(RunReport(ended, step, budget, started, time.monotonic()))
        raise
    outcome = out.get("deadline_outcome")
    if outcome is None:  # interrupted: the run goes on when it is resumed
        return out
    reports.append(RunReport(outcome.terminal, outcome.step, budget, started, time.monotonic()))
    if outcome.terminal is Terminal.DEADLINE_EXCEEDED:
        raise DeadlineExceeded(outcome.reason, step=outcome.step, outcome=outcome, state=out)
    return out


class Served:
    """An ASGI app served by uvicorn on a free loopback port, in a thread of its own.

    ```python
    with Served(app) as server:
        httpx.get(server.url("/health"))
    ```
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=3,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="Served", daemon=True)
        self.host = host
        self.port = port

    def url(self, path: str = "") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def start(self) -> Served:
        self._thread.start()
        end = time.monotonic() + 20.0
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > end:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    def __enter__(self) -> Served:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
