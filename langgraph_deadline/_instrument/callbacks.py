"""Step records as LangChain custom events, for any callback handler and `astream_events`."""

from __future__ import annotations

import logging
from typing import Any, Final

from langchain_core.callbacks import BaseCallbackManager, dispatch_custom_event
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

from .._core.observe import RunEvent, StepEvent, TokensEvent, run_fields, step_fields
from .._core.records import StepStatus, Terminal

__all__ = ["RUN_EVENT", "STEP_EVENT", "TOKENS_EVENT", "CallbacksObserver"]

log = logging.getLogger("langgraph_deadline")

STEP_EVENT: Final = "langgraph_deadline.step"
RUN_EVENT: Final = "langgraph_deadline.run"
TOKENS_EVENT: Final = "langgraph_deadline.tokens_after_deadline"
_DEADLINES_DOING: Final = frozenset(
    {StepStatus.SKIPPED, StepStatus.TIMED_OUT, StepStatus.ABANDONED, StepStatus.STALE}
)


class CallbacksObserver:
    """Dispatch every step record (`"langgraph_deadline.step"`) and run outcome
    (`"langgraph_deadline.run"`) as a LangChain custom event to the callbacks of the runnable
    that is current where the step ended: a node's, a tool's. Tokens a model streamed after its
    deadline go as `"langgraph_deadline.tokens_after_deadline"` (`step`, `tokens`, `run_id`).

    `deadline_only=True` (the default set's) sends only what the deadline did: a step cut,
    skipped, abandoned or served stale, a run that ran out of time. A run with time to spare
    then sends the user's callback handlers nothing an unwrapped graph would not (a failed or
    cancelled step is LangGraph's to report, as it does without us).

    The data is a plain dict of names and numbers (see `step_fields`). Dispatch is synchronous,
    from sync code, async code and threads alike: sync handlers run inline, async handlers run
    to completion on LangChain's callback thread (as `dispatch_custom_event` does from sync
    code). Where no runnable is current (a step outside any graph, the run-wide backstop that
    closes steps when a whole run is cancelled, the outcome of a top-level run) there is no
    parent run to attach the event to, and nothing is sent. Never raises.
    """

    __slots__ = ("_deadline_only",)

    def __init__(self, *, deadline_only: bool = False) -> None:
        if not isinstance(deadline_only, bool):
            raise TypeError(f"deadline_only must be a bool, got {deadline_only!r}")
        self._deadline_only = deadline_only

    def on_step(self, event: StepEvent) -> None:
        if self._deadline_only and event.record.status not in _DEADLINES_DOING:
            return
        if (config := _listening()) is not None:
            _dispatch(STEP_EVENT, step_fields(event), config)

    def on_run(self, event: RunEvent) -> None:
        if self._deadline_only and event.outcome.terminal is not Terminal.DEADLINE_EXCEEDED:
            return
        if (config := _listening()) is not None:
            _dispatch(RUN_EVENT, run_fields(event), config)

    def on_tokens_after_deadline(self, event: TokensEvent) -> None:
        if (config := _listening()) is not None:
            data = {"run_id": event.run_id, "step": event.step, "tokens": event.tokens}
            _dispatch(TOKENS_EVENT, data, config)

    def __repr__(self) -> str:
        return (
            "CallbacksObserver(deadline_only=True)"
            if self._deadline_only
            else "CallbacksObserver()"
        )


def _listening() -> RunnableConfig | None:
    """The current runnable's config when it has callback handlers, else None (cheaply)."""
    config = var_child_runnable_config.get()
    if not config:
        return None
    callbacks = config.get("callbacks")
    if not callbacks or (isinstance(callbacks, BaseCallbackManager) and not callbacks.handlers):
        return None
    return config


def _dispatch(name: str, data: dict[str, Any], config: RunnableConfig) -> None:
    try:
        dispatch_custom_event(name, data, config=config)
    except Exception:
        log.debug("could not dispatch %s as a LangChain custom event", name, exc_info=True)
