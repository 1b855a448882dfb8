"""The scripted replies of `FakeOpenAIServer`: what the fake model answers, request by request.

Frozen values, checked when built, so a bad script fails in the test that writes it, not in the
server thread.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ChatReply", "ScriptedToolCall", "asked_words", "check_seconds", "words"]

WORDS = re.compile(r"\s*\S+|\s+")
"""A word token with its leading space: how text is split into chunks and prompts are counted."""
ASKED_LENGTH = re.compile(r"\bat most (\d+) words\b", re.IGNORECASE)
"""How a system message asks for a length ("Answer in at most 40 words", as the length hint of
`budgeted_model` and `DeadlineMiddleware` does)."""
_SENTENCE_END = (".", "!", "?")


def asked_words(body: Mapping[str, Any]) -> int | None:
    """The most words a request's system messages allow the answer ("at most N words"; the
    least N if several), or None."""
    messages = body.get("messages")
    asked: list[int] = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") not in ("system", "developer"):
            continue
        content = message.get("content")
        parts = [content] if isinstance(content, str) else content or []
        for part in parts:
            text = (
                part
                if isinstance(part, str)
                else part.get("text")
                if isinstance(part, dict)
                else None
            )
            if isinstance(text, str):
                asked += [int(n) for n in ASKED_LENGTH.findall(text)]
    return min(asked) if asked else None


def words(text: str) -> list[str]:
    """`text` as word tokens, each keeping its leading space."""
    return WORDS.findall(text)


def check_seconds(name: str, value: float, *, allow_inf: bool = False) -> float:
    """`value` as a float of seconds >= 0 (finite unless `allow_inf`); ValueError otherwise."""
    value = float(value)
    if math.isnan(value) or value < 0 or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call the model "decides" to make. `arguments` is sent as JSON text (a string is
    sent as is, so a test can also send broken JSON). `id` defaults to `call_<request>_<index>`."""

    name: str
    arguments: Mapping[str, Any] | str = dataclasses.field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclasses.dataclass(frozen=True)
class ChatReply:
    """One scripted answer. Build it with the class methods:

    - `ChatReply.text("Hello there")` streams `"Hello"`, `" there"` (or pass the tokens yourself);
    - `ChatReply.counting(50)` streams `"1"`, `" 2"`, ... `" 50"` (a long answer, easy to check);
    - `ChatReply.tool_call("search", {"q": "x"})`, `ChatReply.tool_calls(call1, call2)`;
    - `ChatReply.error(500)`, `ChatReply.rate_limited(retry_after=1.0)`;
    - `ChatReply.hang()`: never answers; the request stays open until the client leaves.

    Every kind takes `delay` (seconds before the first byte, i.e. before the status line; may be
    `math.inf`) and `headers` (extra response headers). Streams take `chunk_interval` (seconds
    before each token chunk; defaults to the server's). `reply.stalling(after=5, seconds=10.0)`
    is the same reply whose stream stops sending after its 5th token chunk for 10 s (default:
    for good), the connection open: a stalled stream.

    A text answer made with `follows_length_hint=True` stands in for a model that obeys a
    length budget its prompt states: when a system message of the request says "at most N
    words" (the length hint `budgeted_model` and `DeadlineMiddleware` add when the time left
    sets `max_tokens`), it answers only its sentences that fit in N words (each word one
    token), or its first N words if none does, and ends with `finish_reason` `"stop"`. A real
    model writes a different, shorter answer; this one only stops early, which is what a
    deadline test can check. `max_tokens` itself stays a hard cut (`"length"`), as at OpenAI.
    """

    tokens: tuple[str, ...] = ()
    calls: tuple[ScriptedToolCall, ...] = ()
    status: int = 200
    error_message: str | None = None
    retry_after: float | None = None
    delay: float = 0.0
    chunk_interval: float | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stall_after: int | None = None  # token chunks sent before the stream stalls
    stall_for: float = math.inf  # seconds it stalls for
    follows_length_hint: bool = False

    def __post_init__(self) -> None:
        check_seconds("delay", self.delay, allow_inf=True)
        check_seconds("stall_for", self.stall_for, allow_inf=True)
        if self.stall_after is not None and (
            isinstance(self.stall_after, bool)
            or not isinstance(self.stall_after, int)
            or self.stall_after < 0
        ):
            raise ValueError(f"stall_after must be an int >= 0, got {self.stall_after!r}")
        if self.chunk_interval is not None:
            check_seconds("chunk_interval", self.chunk_interval)
        if self.retry_after is not None:
            check_seconds("retry_after", self.retry_after)
        if self.status != 200 and not 400 <= self.status <= 599:
            raise ValueError(f"status must be 200 or an error 400..599, got {self.status!r}")
        if self.status != 200 and (self.tokens or self.calls):
            raise ValueError("an error reply carries no tokens or tool calls")

    # -- builders -----------------------------------------------------------------------------

    @classmethod
    def text(
        cls,
        content: str | Sequence[str],
        *,
        delay: float = 0.0,
        chunk_interval: float | None = None,
        headers: Mapping[str, str] | None = None,
        follows_length_hint: bool = False,
    ) -> ChatReply:
        """A text answer; a string is split into word tokens (each keeps its leading space)."""
        tokens = tuple(words(content)) if isinstance(content, str) else tuple(content)
        return cls(
            tokens=tokens,
            delay=delay,
            chunk_interval=chunk_interval,
            headers=dict(headers or {}),
            follows_length_hint=follows_length_hint,
        )

    @classmethod
    def counting(
        cls,
        n: int,
        *,
        delay: float = 0.0,
        chunk_interval: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ChatReply:
        """A text answer of `n` tokens: `"1"`, `" 2"`, ..., `f" {n}"`."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n!r}")
        tokens = ["1", *(f" {i}" for i in range(2, n + 1))]
        return cls.text(tokens, delay=delay, chunk_interval=chunk_interval, headers=headers)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        id: str | None = None,
        text: str | None = None,
        delay: float = 0.0,
        chunk_interval: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ChatReply:
        """The model calls one tool (after saying `text`, if given)."""
        call = ScriptedToolCall(name, {} if arguments is None else arguments, id)
        return cls.tool_calls(
            call, text=text, delay=delay, chunk_interval=chunk_interval, headers=headers
        )

    @classmethod
    def tool_calls(
        cls,
        *calls: ScriptedToolCall,
        text: str | None = None,
        delay: float = 0.0,
        chunk_interval: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ChatReply:
        """The model calls several tools in one turn (parallel tool calls)."""
        if not calls:
            raise ValueError("tool_calls needs at least one ScriptedToolCall")
        return cls(
            tokens=tuple(words(text or "")),
            calls=tuple(calls),
            delay=delay,
            chunk_interval=chunk_interval,
            headers=dict(headers or {}),
        )

    @classmethod
    def error(
        cls,
        status: int = 500,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> ChatReply:
        """An OpenAI-style JSON error. `retry_after` (seconds) sets the `Retry-After` header."""
        if status < 400:
            raise ValueError(f"an error status is >= 400, got {status!r}")
        return cls(
            status=status,
            error_message=message,
            retry_after=retry_after,
            delay=delay,
            headers=dict(headers or {}),
        )

    @classmethod
    def rate_limited(
        cls,
        retry_after: float | None = None,
        message: str = "Rate limit reached (scripted).",
        *,
        delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> ChatReply:
        """A 429, optionally with `Retry-After`."""
        return cls.error(429, message, retry_after=retry_after, delay=delay, headers=headers)

    @classmethod
    def hang(cls) -> ChatReply:
        """Never send a byte: the request stays open until the client goes away."""
        return cls(delay=math.inf)

    def stalling(self, after: int, seconds: float = math.inf) -> ChatReply:
        """This reply, its stream stopped after `after` token chunks for `seconds` (the
        connection stays open; then it goes on, unless the client left)."""
        return dataclasses.replace(self, stall_after=after, stall_for=seconds)

    # -- what it means ------------------------------------------------------------------------

    def tokens_for(self, body: Mapping[str, Any]) -> tuple[str, ...]:
        """The tokens this reply answers the request `body` with: all of them, or, following
        a length hint (`follows_length_hint`), its sentences that fit in the words asked."""
        asked = asked_words(body) if self.follows_length_hint else None
        if asked is None or len(self.tokens) <= asked:
            return self.tokens
        fits = self.tokens[:asked]
        ends = [i for i, token in enumerate(fits) if token.rstrip().endswith(_SENTENCE_END)]
        return fits[: ends[-1] + 1] if ends else fits

    @property
    def content(self) -> str:
        return "".join(self.tokens)

    @property
    def is_error(self) -> bool:
        return self.status != 200
