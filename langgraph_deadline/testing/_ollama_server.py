"""A local server speaking Ollama's chat API (`POST /api/chat`): one JSON object, or a stream
of them, one per line (NDJSON), the last with `"done": true`; errors as `{"error": ...}`.

`ChatOllama(base_url=server.url, model="fake")` talks to it for real: the ollama client's own
parsing. The request's `options.num_predict` cuts the answer (`done_reason` `"length"`). The
rest is `ChatServer` (`_chat_server.py`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from ._chat_server import ChatServer, Exchange

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

__all__ = ["FakeOllamaServer", "OllamaExchange"]

_CREATED = "2026-01-01T00:00:00.000000Z"


class OllamaExchange(Exchange):
    """One response in Ollama's format: a line per token, a line per tool call (Ollama sends
    a call whole), then the closing line with the counts."""

    stream_type: ClassVar[str] = "application/x-ndjson"

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": message}

    def _message(self, text: str, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"function": {"name": name, "arguments": json.loads(args or "{}")}}
                for _, name, args in calls
            ]
        return message

    def _line(self, message: dict[str, Any], **more: Any) -> bytes:
        line = {"model": self.model, "created_at": _CREATED, "message": message, **more}
        return json.dumps(line).encode() + b"\n"

    def _done(self, cut: bool, n_tokens: int) -> dict[str, Any]:
        return {
            "done": True,
            "done_reason": "length" if cut else "stop",
            "total_duration": 1,
            "load_duration": 1,
            "prompt_eval_count": self._prompt_tokens(),
            "prompt_eval_duration": 1,
            "eval_count": n_tokens,
            "eval_duration": 1,
        }

    def _answer(
        self, text: str, calls: list[tuple[str, str, str]], cut: bool, n_tokens: int
    ) -> dict[str, Any]:
        return {
            "model": self.model,
            "created_at": _CREATED,
            "message": self._message(text, calls),
            **self._done(cut, n_tokens),
        }

    def _chunks(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        lines = [self._line(self._message(token, []), done=False) for token in self.tokens]
        lines += [self._line(self._message("", [call]), done=False) for call in calls]
        return lines

    def _tail(self, calls: list[tuple[str, str, str]], sent: int, cut: bool) -> bytes:
        return self._line(self._message("", []), **self._done(cut, sent))


class FakeOllamaServer(ChatServer):
    """Ollama's `POST /api/chat` on loopback, in a background thread: `FakeOpenAIServer` in
    Ollama's wire format (same script, same questions afterwards).

    ```python
    with FakeOllamaServer([ChatReply.counting(100)], chunk_interval=0.05) as server:
        model = ChatOllama(base_url=server.url, model="fake")
        ...
    ```

    A request asks for a stream unless its body says `"stream": false`, as Ollama's does.
    """

    wire = "ollama"
    exchange = OllamaExchange

    def _routes(self) -> list[BaseRoute]:
        from starlette.routing import Route

        return [Route("/api/chat", self._endpoint(), methods=["POST"])]
