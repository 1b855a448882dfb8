"""What a loopback chat server (`FakeOpenAIServer`, `FakeAnthropicServer`, ...) saw of each
request: when it came, what was sent back, and when."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, Literal

from ._chat_script import ChatReply

__all__ = ["ServedChatRequest", "Wire", "disconnects"]

Wire = Literal["openai", "anthropic", "ollama", "gemini", "bedrock"]
"""The wire protocol a request came in: which API the server spoke."""

_LIMIT_AT: Final[dict[str, tuple[tuple[str, ...], ...]]] = {
    "openai": (("max_completion_tokens",), ("max_tokens",)),
    "anthropic": (("max_tokens",),),
    "ollama": (("options", "num_predict"),),
    "gemini": (("generationConfig", "maxOutputTokens"),),
    "bedrock": (("inferenceConfig", "maxTokens"),),
}
"""Where each protocol's request body holds its output-token limit."""


def _at(body: Mapping[str, Any], path: tuple[str, ...]) -> object:
    value: object = body
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


@dataclasses.dataclass
class ServedChatRequest:
    """One chat request (to OpenAI's `/v1/chat/completions`, Anthropic's `/v1/messages`,
    Ollama's `/api/chat`, Gemini's `:generateContent`, Bedrock's `/converse`...; `wire` says
    which, `path` where).
    Times are `time.monotonic()` readings.

    A *chunk* here is a token chunk: one event of the stream carrying content or a piece of a
    tool call. The framing events (a stream's opening and closing events, the usage, OpenAI's
    `[DONE]`) are sent but not counted.

    Each time is taken just after the server handed the bytes to the socket, so a fast client
    can see a response end before `ended` (or `status`) is filled in: `wait_idle()` first.
    Everything sent before a disconnect is recorded before `disconnected` is.
    """

    index: int
    started: float
    body: dict[str, Any]
    headers: dict[str, str] = dataclasses.field(repr=False)  # lower-cased names
    reply: ChatReply
    status: int | None = None
    first_byte: float | None = None  # the status line and headers were sent
    chunk_times: list[float] = dataclasses.field(default_factory=list)
    ended: float | None = None  # the whole response was written
    disconnected: float | None = None  # the client went away before the end
    cut_by_shutdown: bool = False  # the server stopped while this response was open
    path: str = "/v1/chat/completions"
    wire: Wire = "openai"

    @property
    def stream(self) -> bool:
        """Whether the answer was asked for as a stream (Ollama streams unless told not to;
        Gemini by its path, `:streamGenerateContent`)."""
        if self.wire == "gemini":
            return "streamGenerateContent" in self.path
        if self.wire == "bedrock":
            return self.path.endswith("/converse-stream")
        return bool(self.body.get("stream", self.wire == "ollama"))

    @property
    def messages(self) -> int:
        msgs = self.body.get("contents" if self.wire == "gemini" else "messages")
        return len(msgs) if isinstance(msgs, list) else 0

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def max_tokens(self) -> int | None:
        """The output-token limit asked for, under the protocol's name (OpenAI's
        `max_completion_tokens`, else `max_tokens`; Anthropic's `max_tokens`; Ollama's
        `options.num_predict`; Gemini's `generationConfig.maxOutputTokens`; Bedrock's
        `inferenceConfig.maxTokens`): the server stops
        there, as the provider does (OpenAI's `finish_reason` `"length"`)."""
        for path in _LIMIT_AT[self.wire]:
            value = _at(self.body, path)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    @property
    def chunks_sent(self) -> int:
        return len(self.chunk_times)

    @property
    def retry_count(self) -> int:
        """The OpenAI and Anthropic SDKs' `x-stainless-retry-count` header: 0 for a first
        attempt (and for a client that does not say)."""
        try:
            return int(self.headers.get("x-stainless-retry-count", "0"))
        except ValueError:
            return 0

    @property
    def read_timeout(self) -> float | None:
        """The timeout the client gave this request, as its SDK tells the server: the OpenAI
        and Anthropic SDKs' `x-stainless-read-timeout` header, google-genai's
        `x-server-timeout` (whole seconds, rounded up)."""
        for header in ("x-stainless-read-timeout", "x-server-timeout"):
            try:
                return float(self.headers[header])
            except (KeyError, ValueError):
                continue
        return None

    @property
    def open(self) -> bool:
        """Still being answered: not ended, not disconnected, not cut by the server stopping."""
        return self.ended is None and self.disconnected is None and not self.cut_by_shutdown

    def chunks_sent_after(self, t: float) -> int:
        return sum(c > t for c in self.chunk_times)


def disconnects(requests: list[ServedChatRequest]) -> int:
    """How many of `requests` saw their client go away before the end."""
    return sum(r.disconnected is not None for r in requests)
