"""Stopping a token stream at its first chunk past the deadline when cancelling it is not
enough: a sync stream's worker thread cannot be killed, and an async stream's cancellation can
be swallowed below; a callback that raises from `on_llm_new_token` ends the provider's stream
loop. Also the partial answer: what a cut stream had said."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from typing import Any, Final, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import ensure_config
from langchain_core.runnables.config import merge_configs, var_child_runnable_config
from langchain_core.tracers.context import register_configure_hook

from .._core.context import current_scopes
from .._core.errors import DeadlineExceeded
from .._core.observe import TokensEvent, emit_tokens
from .._core.stall import idle, progress

T = TypeVar("T")

__all__ = [
    "PartialAnswer",
    "callbacks_in_context",
    "heartbeating",
    "stopping_streams",
    "streams_let_go",
    "streams_stopped",
    "watching_streams",
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


class _StopInStep(_TokenListener):
    """Stops a LangChain model stream inside a budgeted step (a node of any state, a `@task`,
    a `budgeted_model` or `DeadlineMiddleware` call) at its first token past the step's
    deadline, the one in context:

    - on a worker thread, which cannot be cancelled, it raises `DeadlineExceeded`: that ends the
      provider's stream loop and closes its response;
    - in a task that is being cancelled, it raises `CancelledError` again: the cancellation was
      swallowed on the way down (Python 3.11's `asyncio.wait_for`, which langchain-openai wraps
      around each chunk's read, returns a chunk that came with the cancellation and drops it),
      and the stream would run to its end. Never in a task not being cancelled: an answer is
      never cut by a callback before its budget's cut.

    LangChain adds it to the callbacks of every run started while `_IN_STEP` holds it (a
    configure hook), so a step pays for it only by setting that variable."""

    raise_error = True  # DeadlineExceeded reaches the provider's stream loop

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        scopes = current_scopes()
        if not scopes or not (deadline := scopes[-1].effective).expired:
            return
        step = scopes[-1].name or "a step"
        try:
            task = asyncio.current_task()
        except RuntimeError:  # a worker thread
            emit_tokens(TokensEvent(step=step, tokens=1))
            raise DeadlineExceeded(
                f"deadline exceeded in {step}: stream stopped", deadline=deadline, step=step
            ) from None
        if task is not None and task.cancelling():
            emit_tokens(TokensEvent(step=step, tokens=1))
            raise asyncio.CancelledError(f"deadline exceeded in {step}: stream stopped")


_STOP_IN_STEP: Final = _StopInStep()
_IN_STEP: Final[ContextVar[_StopInStep | None]] = ContextVar(
    "langgraph_deadline.stop_in_step", default=None
)
register_configure_hook(_IN_STEP, inheritable=True)


def streams_stopped() -> Token[_StopInStep | None]:
    """From here on (until `streams_let_go`), model streams started in this context stop at
    their first token past the deadline in context (`_StopInStep`). A worker thread's job
    runs in a copy of the context it was submitted from: set it before submitting."""
    return _IN_STEP.set(_STOP_IN_STEP)


def streams_let_go(token: Token[_StopInStep | None]) -> None:
    _IN_STEP.reset(token)


@contextlib.contextmanager
def stopping_streams() -> Iterator[None]:
    """`streams_stopped` for a block (a model call; nodes use the token pair, on the hot path)."""
    token = streams_stopped()
    try:
        yield
    finally:
        streams_let_go(token)


class _Progress(_TokenListener):
    """Every chunk of a model's stream is progress of the steps it runs in (`stall.progress`:
    their idle caps start again); its end stops the gap clock of the model call's own watch.
    It makes the call stream (it has the shape LangChain looks for to stream `invoke`, as
    LangGraph's "messages" mode does): only a streamed call has chunks to watch."""

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        progress()

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        idle()

    def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
        idle()

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[T]) -> AsyncIterator[T]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[T]) -> Iterator[T]:
        return output


_PROGRESS: Final = _Progress()
_WATCHED: Final[ContextVar[_Progress | None]] = ContextVar(
    "langgraph_deadline.watched_streams", default=None
)
register_configure_hook(_WATCHED, inheritable=True)


_NOTHING: Final = contextlib.nullcontext()
"""The block of a helper below with nothing to do: no generator made, on every node's path."""


def watching_streams(on: bool = True) -> AbstractContextManager[None]:
    """Model calls made in the block stream, and their chunks are progress of the steps with an
    idle cap they run in (`_Progress`). `on=False`: a no-op (a step without an idle cap)."""
    return _watching_streams() if on else _NOTHING


@contextlib.contextmanager
def _watching_streams() -> Iterator[None]:
    token = _WATCHED.set(_PROGRESS)
    try:
        yield
    finally:
        _WATCHED.reset(token)


def heartbeating(runtime: Any) -> Any:
    """`runtime` (LangGraph's, injected into a node) whose `heartbeat()` (where the installed
    LangGraph has it) and `stream_writer` writes are also progress of the steps with an idle
    cap they run in, as they refresh LangGraph's own `idle_timeout`."""
    override = getattr(runtime, "override", None)
    if override is None:
        return runtime
    changes: dict[str, Any] = {}
    writer = getattr(runtime, "stream_writer", None)
    if writer is not None:

        def write(chunk: Any) -> None:
            progress()
            writer(chunk)

        changes["stream_writer"] = write
    beat = getattr(runtime, "heartbeat", None)
    if beat is not None:

        def heartbeat() -> None:
            progress()
            beat()

        changes["heartbeat"] = heartbeat
    return override(**changes) if changes else runtime


class PartialAnswer(_TokenListener):
    """Collects the text a model streamed, so that a call cut at its budget keeps what it had
    already said (the user read those tokens; they were paid for). Text chunks only: a tool
    call streamed halfway is not an answer."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        if isinstance(token, str) and token:
            self.parts.append(token)

    @property
    def text(self) -> str:
        """What the model said before it was cut (stripped), or ""."""
        return "".join(self.parts).strip()


def callbacks_in_context(*handlers: BaseCallbackHandler | None) -> AbstractContextManager[None]:
    """The runnable config in context gets `handlers` (the Nones left out) for the block:
    model calls made there without a config of their own (LangChain's agent loop) report
    their tokens to them."""
    given = [h for h in handlers if h is not None]
    return _callbacks_in_context(given) if given else _NOTHING


@contextlib.contextmanager
def _callbacks_in_context(given: list[BaseCallbackHandler]) -> Iterator[None]:
    cfg = merge_configs(ensure_config(var_child_runnable_config.get()), {"callbacks": given})
    token = var_child_runnable_config.set(cfg)
    try:
        yield
    finally:
        var_child_runnable_config.reset(token)
