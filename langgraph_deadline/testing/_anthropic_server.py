"""A local server speaking Anthropic's Messages API (`POST /v1/messages`): the JSON message,
or the SSE stream of events (`message_start`, `content_block_delta`, ..., `message_stop`), and
Anthropic's JSON errors (529 `overloaded_error`).

`ChatAnthropic(base_url=server.url, api_key="test")` talks to it for real: the Anthropic
SDK's own SSE parsing and retries. The rest is `ChatServer` (`_chat_server.py`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._chat_server import ARGUMENT_PIECE, ChatServer, Exchange

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

__all__ = ["AnthropicExchange", "FakeAnthropicServer"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


class AnthropicExchange(Exchange):
    """One response in the Anthropic Messages format: a text block (when the reply says
    something), then a `tool_use` block per tool call."""

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _stop_reason(self, calls: list[tuple[str, str, str]], cut: bool) -> str:
        return "max_tokens" if cut else "tool_use" if calls else "end_turn"

    def _answer(
        self, text: str, calls: list[tuple[str, str, str]], cut: bool, n_tokens: int
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [
            {"type": "tool_use", "id": id_, "name": name, "input": json.loads(args or "{}")}
            for id_, name, args in calls
        ]
        return {
            "id": f"msg_{self.completion_id}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self._stop_reason(calls, cut),
            "stop_sequence": None,
            "usage": {"input_tokens": self._prompt_tokens(), "output_tokens": n_tokens},
        }

    def _opener(self, calls: list[tuple[str, str, str]]) -> bytes:
        message = {**self._answer("", [], False, 0), "content": [], "stop_reason": None}
        opener = _event("message_start", {"message": message})
        if self.tokens:
            block = {"type": "text", "text": ""}
            opener += _event("content_block_start", {"index": 0, "content_block": block})
        return opener

    def _chunks(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        """A text delta per token; a tool call's block starts with its first piece of JSON
        (closing the block before it), and each piece is a chunk."""
        chunks = [
            _event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "text_delta", "text": token}},
            )
            for token in self.tokens
        ]
        self.blocks = [0] * len(chunks)  # the block each chunk belongs to
        index = 1 if self.tokens else 0
        for id_, name, args in calls:
            block = {"type": "tool_use", "id": id_, "name": name, "input": {}}
            start = _event("content_block_start", {"index": index, "content_block": block})
            if index > 0:
                start = _event("content_block_stop", {"index": index - 1}) + start
            pieces = [args[p : p + ARGUMENT_PIECE] for p in range(0, len(args), ARGUMENT_PIECE)]
            for n, piece in enumerate(pieces or [""]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                event = _event("content_block_delta", {"index": index, "delta": delta})
                chunks.append(start + event if n == 0 else event)
                self.blocks.append(index)
            index += 1
        return chunks

    def _tail(self, calls: list[tuple[str, str, str]], sent: int, cut: bool) -> bytes:
        tail = b""
        if sent:
            tail = _event("content_block_stop", {"index": self.blocks[sent - 1]})
        elif self.tokens:
            tail = _event("content_block_stop", {"index": 0})
        delta = {"stop_reason": self._stop_reason(calls, cut), "stop_sequence": None}
        tail += _event("message_delta", {"delta": delta, "usage": {"output_tokens": sent}})
        return tail + _event("message_stop", {})


class FakeAnthropicServer(ChatServer):
    """Anthropic's `POST /v1/messages` on loopback, in a background thread: `FakeOpenAIServer`
    in the Anthropic wire format (same script, same questions afterwards).

    ```python
    with FakeAnthropicServer([ChatReply.counting(100)], chunk_interval=0.05) as server:
        model = ChatAnthropic(base_url=server.url, api_key="test", model="claude-fake",
                              streaming=True)
        ...  # cancel the call after 0.5 s
        assert server.wait_disconnected(1.0)
    ```

    The request's `max_tokens` cuts the answer (`stop_reason` `"max_tokens"`); answer
    `ChatReply.error(529, retry_after=1.0)` for Anthropic's "overloaded".
    """

    wire = "anthropic"
    exchange = AnthropicExchange

    def _routes(self) -> list[BaseRoute]:
        from starlette.routing import Route

        return [Route("/v1/messages", self._endpoint(), methods=["POST"])]
