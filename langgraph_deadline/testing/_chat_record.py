"""What `FakeOpenAIServer` saw of each request: when it came, what was sent back, and when."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._chat_script import ChatReply

__all__ = ["ServedChatRequest", "disconnects"]


@dataclasses.dataclass
class ServedChatRequest:
    """One request to `/v1/chat/completions`. Times are `time.monotonic()` readings.

    A *chunk* here is a token chunk: one SSE event carrying content or a tool-call delta. The
    framing events (the opening role delta, the finish delta, the usage event, `[DONE]`) are
    sent but not counted.

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

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream", False))

    @property
    def messages(self) -> int:
        msgs = self.body.get("messages")
        return len(msgs) if isinstance(msgs, list) else 0

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def max_tokens(self) -> int | None:
        """The output-token limit asked for (`max_completion_tokens`, else `max_tokens`): the
        server stops there, with `finish_reason` `"length"`, as OpenAI does."""
        for key in ("max_completion_tokens", "max_tokens"):
            value = self.body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    @property
    def chunks_sent(self) -> int:
        return len(self.chunk_times)

    @property
    def retry_count(self) -> int:
        """The OpenAI SDK's `x-stainless-retry-count` header: 0 for a first attempt."""
        try:
            return int(self.headers.get("x-stainless-retry-count", "0"))
        except ValueError:
            return 0

    @property
    def read_timeout(self) -> float | None:
        """The OpenAI SDK's `x-stainless-read-timeout` header: the timeout it gave this request."""
        try:
            return float(self.headers["x-stainless-read-timeout"])
        except (KeyError, ValueError):
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
