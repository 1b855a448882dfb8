"""Stopping a token stream at its first chunk past the deadline when cancelling it is not
enough: a sync stream's worker thread cannot be killed, and an async stream's cancellation can
be swallowed below; a callback that raises from `on_llm_new_token` ends the provider's stream
loop. Also the partial answer: what a cut stream had said."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar, Token
from typing import Any, Final

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import ensure_config
from langchain_core.runnables.config import merge_configs, var_child_runnable_config
from langchain_core.tracers.context import register_configure_hook

from .._core.context import current_scopes
from .._core.deadline import Deadline
from .._core.errors import DeadlineExceeded
from .._core.observe import TokensEvent, emit_tokens

__all__ = [
    "PartialAnswer",
    "Recut",
    "callbacks_in_context",
    "stream_stopper",
    "streams_let_go",
    "streams_stopped",
]


class _TokenListener(BaseCallbackHandler):
    """A callback that only hears tokens: every other event is skipped (a chat model's start
    would otherwise be turned into text for it, every message of the call)."""

    run_inline = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_retry = True
    ignore_custom_event = True
    ignore_chat_model = True


class _StopStream(_TokenListener):
    """Raises `DeadlineExceeded` from the first token that arrives after the deadline, which
    ends the provider's stream loop and closes its response (the connection drops). That token
    is reported to the observers (`on_tokens_after_deadline`)."""

    raise_error = True

    def __init__(self, deadline: Deadline, step: str) -> None:
        self.deadline = deadline
        self.step = step

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        _stop(self.deadline, self.step)


def _stop(deadline: Deadline, step: str) -> None:
    if deadline.expired:
        emit_tokens(TokensEvent(step=step, tokens=1))
        raise DeadlineExceeded(
            f"deadline exceeded in {step}: stream stopped", deadline=deadline, step=step
        )


def stream_stopper(
    deadline: Deadline | None, step: str, *, sync: bool
) -> BaseCallbackHandler | None:
    """The callback that ends a model's stream past `deadline` when cancelling it does not: a
    sync stream at its first chunk past it (its thread cannot be cancelled), an async one whose
    cancellation was swallowed below (`Recut`). None without a deadline."""
    if deadline is None:
        return None
    return _StopStream(deadline, step) if sync else Recut(deadline, step)


class Recut(_TokenListener):
    """Cancels again an async model stream that goes on past `stop` though its task was asked
    to stop: a cancellation swallowed on the way down. Python 3.11's `asyncio.wait_for` (which
    langchain-openai wraps around each chunk's read) returns a chunk that arrived with the
    cancellation and drops the cancellation; the stream would then run to its end. At the next
    token after `stop`, in a task with a cancellation pending, this raises `CancelledError`
    again, which ends the stream (its connection closed) as the first one should have. Never
    while the task is not being cancelled: an answer is never cut by a callback before its
    budget's cut."""

    def __init__(self, stop: Deadline | None = None, step: str = "") -> None:
        self.stop = stop
        self.step = step

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        _recut(self.stop, self.step)


def _recut(stop: Deadline | None, step: str) -> None:
    if stop is None or not stop.expired:
        return
    try:
        task = asyncio.current_task()
    except RuntimeError:  # a worker thread: `_StopStream` stops sync streams
        return
    if task is not None and task.cancelling():
        emit_tokens(TokensEvent(step=step, tokens=1))
        raise asyncio.CancelledError(f"deadline exceeded in {step}: stream stopped")


class _StopInStep(_TokenListener):
    """Stops any LangChain model stream inside a budgeted step at its first token past the
    step's deadline, whatever calls the model (user code in a node of any state, a `@task`):
    on a worker thread as `_StopStream` does (the thread cannot be stopped otherwise), in a
    task as `Recut` does. The step's deadline is the one in context. LangChain adds it to the
    callbacks of every run started while `_IN_STEP` holds it (a configure hook), so a step
    pays for it only by setting that variable."""

    raise_error = True  # DeadlineExceeded reaches the provider's stream loop

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        scopes = current_scopes()
        if not scopes:
            return
        deadline, step = scopes[-1].effective, scopes[-1].name or "a step"
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a worker thread
            _stop(deadline, step)
            return
        _recut(deadline, step)


_STOP_IN_STEP: Final = _StopInStep()
_IN_STEP: Final[ContextVar[_StopInStep | None]] = ContextVar(
    "langgraph_deadline.stop_in_step", default=None
)
register_configure_hook(_IN_STEP, inheritable=True)


def streams_stopped() -> Token[_StopInStep | None]:
    """From here on (until `streams_let_go`), model streams started in this context stop at
    their first token past the deadline in context (`_StopInStep`)."""
    return _IN_STEP.set(_STOP_IN_STEP)


def streams_let_go(token: Token[_StopInStep | None]) -> None:
    _IN_STEP.reset(token)


class PartialAnswer(Recut):
    """Collects the text a model streamed, so that a call cut at its budget keeps what it had
    already said (the user read those tokens; they were paid for). Text chunks only: a tool
    call streamed halfway is not an answer. Given `stop`, it also cuts a stream again whose
    cancellation was swallowed (`Recut`)."""

    def __init__(self, stop: Deadline | None = None, step: str = "") -> None:
        super().__init__(stop, step)
        self.parts: list[str] = []

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        if isinstance(token, str) and token:
            self.parts.append(token)
        super().on_llm_new_token(token, **kwargs)

    @property
    def text(self) -> str:
        """What the model said before it was cut (stripped), or ""."""
        return "".join(self.parts).strip()


@contextlib.contextmanager
def callbacks_in_context(*handlers: BaseCallbackHandler | None) -> Iterator[None]:
    """The runnable config in context gets `handlers` (the Nones left out) for the block:
    model calls made there without a config of their own (LangChain's agent loop) report
    their tokens to them."""
    given = [h for h in handlers if h is not None]
    if not given:
        yield
        return
    cfg = merge_configs(ensure_config(var_child_runnable_config.get()), {"callbacks": given})
    token = var_child_runnable_config.set(cfg)
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)
