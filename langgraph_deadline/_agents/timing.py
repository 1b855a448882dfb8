"""A model call's stream, timed for the latency book: its time to first token and its seconds
per output token, keyed by model id, so `max_tokens` can follow the time left.

A `StreamTiming` is a callback handler made for one call, just before it starts; the wrapper
that made it calls `close` once the call ended. A call cut before its first token is a
censored sample of time to first token ("longer than this"); one cut mid-stream still tells its
rate. A call that failed before its first token teaches nothing. The rate is read from the
tokens after the stream's first read (the first tokens often come in one read, a few
microseconds apart: they say nothing of how fast the next ones come), and only from a stream
with at least `RATE_TOKENS` of them: ten two-token answers would otherwise teach a rate of
thousands of tokens a second. It also makes the call stream
(it has the shape LangChain looks for to stream a model's `invoke`, as LangGraph's "messages"
stream mode does): the answer is the same, and only a streamed call has a first token.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, LLMResult

from .._learn.book import FIRST_TOKEN, PER_TOKEN, LatencyBook
from .._learn.policy import Learned, learned
from .provider import Rate, model_id

__all__ = ["RATE_TOKENS", "RUN_RATE", "StreamTiming", "book_rate", "timing_for"]

T = TypeVar("T")

RATE_TOKENS: Final = 4
"""The fewest tokens after its first read a stream learns a rate from (see the module)."""
_SAME_READ: Final = 0.001
"""Seconds between two tokens under which the second came in the same read as the first: a
read's tokens are handed on one after the other, tens of microseconds apart."""


class StreamTiming(BaseCallbackHandler):
    """Times one model call's stream for `book` under the model id `name` (see the module)."""

    run_inline = True

    def __init__(self, book: LatencyBook, name: str) -> None:
        self.book = book
        self.name = name
        self.started = time.perf_counter()
        self.first: float | None = None
        self.read = 0.0  # when the last token of the stream's first read came
        self.burst = 0  # the tokens of that first read
        self.last = 0.0
        self.tokens = 0
        self.usage: int | None = None
        self.closed = False

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        if self.closed or not _says_something(token, chunk):
            return
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        if self.tokens == self.burst and (self.burst == 0 or now - self.last < _SAME_READ):
            self.read = now  # still the first read
            self.burst += 1
        self.tokens += 1
        self.last = now

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        self.usage = _output_tokens(response)

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[T]) -> AsyncIterator[T]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[T]) -> Iterator[T]:
        return output

    def close(self, *, cut: bool) -> None:
        """The call ended (`cut`: at its budget): its samples go to the book, once."""
        if self.closed:
            return
        self.closed = True
        first = self.first
        if first is None:
            if cut:
                elapsed = time.perf_counter() - self.started
                self.book.record(FIRST_TOKEN, self.name, elapsed, censored=True)
            return
        self.book.record(FIRST_TOKEN, self.name, first - self.started)
        later = self.tokens - self.burst  # the tokens after the first read, as heard
        if self.usage and not cut:  # as the provider counts them (a chunk may hold several)
            later = round(later * self.usage / self.tokens)
        if later >= RATE_TOKENS and self.last > self.read:
            self.book.record(PER_TOKEN, self.name, (self.last - self.read) / later)


def book_rate(rate: Rate | None, book: object) -> Rate | None:
    """`rate`, or, when none is given and a latency book is attached (to the run:
    `with_deadlines(book=)`; to an agent: `DeadlineMiddleware(book=)`), the output
    rate that book learns (`RUN_RATE`): the one default of `budgeted_model` and the
    middleware."""
    if rate is not None or not isinstance(book, LatencyBook):
        return rate
    found = _RUN_RATES.get(book)
    if found is None:
        found = _RUN_RATES[book] = learned(book, **RUN_RATE)
    return found


RUN_RATE: Final[dict[str, Any]] = {"quantile": 0.9, "min_samples": 10}
"""How a run's book learns its model calls' rate when none is given: its p90 of seconds per
token and of time to first token, once it holds 10 streamed calls of the model."""
_RUN_RATES: weakref.WeakKeyDictionary[LatencyBook, Learned] = weakref.WeakKeyDictionary()


def timing_for(model: object, rate: Rate | None) -> StreamTiming | None:
    """A timing for one call of `model` when its rate is learned, else None."""
    if not isinstance(rate, Learned):
        return None
    return StreamTiming(rate.book, model_id(model))


def _says_something(token: Any, chunk: Any) -> bool:
    """A chunk with text or a piece of a tool call (not the empty opening or closing one). Its
    text may be in content blocks (Anthropic's, with tools bound), not in `token`."""
    if isinstance(token, str) and token:
        return True
    message = getattr(chunk, "message", None)
    if getattr(message, "tool_call_chunks", None):
        return True
    text = getattr(message, "text", None) if isinstance(token, list) else None
    return isinstance(text, str) and bool(text)


def _output_tokens(response: LLMResult) -> int | None:
    for generations in response.generations:
        for generation in generations:
            if isinstance(generation, ChatGeneration):
                usage = getattr(generation.message, "usage_metadata", None)
                if usage and usage.get("output_tokens"):
                    return int(usage["output_tokens"])
    return None
