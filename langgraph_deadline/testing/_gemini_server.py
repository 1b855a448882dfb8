"""A local server speaking the Gemini API (`POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`): the JSON response, or an SSE stream of them, and Google's
JSON errors (503 `UNAVAILABLE`).

`ChatGoogleGenerativeAI(model="gemini-fake", api_key="test", base_url=server.url)` talks to it
for real: google-genai's own parsing and retries. The request's
`generationConfig.maxOutputTokens` cuts the answer (`finishReason` `"MAX_TOKENS"`). The rest is
`ChatServer` (`_chat_server.py`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._chat_server import ChatServer, Exchange

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

__all__ = ["FakeGeminiServer", "GeminiExchange"]

_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


class GeminiExchange(Exchange):
    """One response in the Gemini format: an event per token, an event per function call
    (Gemini sends a call whole), then the closing event with the finish reason and counts."""

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return {
            "error": {"code": status, "message": message, "status": _STATUS.get(status, "INTERNAL")}
        }

    def _response(
        self, parts: list[dict[str, Any]], finish: str | None = None, n_tokens: int | None = None
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        response: dict[str, Any] = {
            "candidates": [candidate],
            "modelVersion": self.model,
            "responseId": f"resp-{self.completion_id}",
        }
        if n_tokens is not None:
            prompt = self._prompt_tokens()
            response["usageMetadata"] = {
                "promptTokenCount": prompt,
                "candidatesTokenCount": n_tokens,
                "totalTokenCount": prompt + n_tokens,
            }
        return response

    @staticmethod
    def _call(name: str, args: str) -> dict[str, Any]:
        return {"functionCall": {"name": name, "args": json.loads(args or "{}")}}

    def _answer(
        self, text: str, calls: list[tuple[str, str, str]], cut: bool, n_tokens: int
    ) -> dict[str, Any]:
        parts = ([{"text": text}] if text else []) + [self._call(n, a) for _, n, a in calls]
        return self._response(parts, "MAX_TOKENS" if cut else "STOP", n_tokens)

    @staticmethod
    def _sse(response: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(response).encode() + b"\r\n\r\n"

    def _chunks(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        events = [self._sse(self._response([{"text": token}])) for token in self.tokens]
        events += [self._sse(self._response([self._call(n, a)])) for _, n, a in calls]
        return events

    def _tail(self, calls: list[tuple[str, str, str]], sent: int, cut: bool) -> bytes:
        return self._sse(self._response([{"text": ""}], "MAX_TOKENS" if cut else "STOP", sent))


class FakeGeminiServer(ChatServer):
    """The Gemini API's `generateContent` and `streamGenerateContent` on loopback, in a
    background thread: `FakeOpenAIServer` in Gemini's wire format (same script, same
    questions afterwards).

    ```python
    with FakeGeminiServer([ChatReply.counting(100)], chunk_interval=0.05) as server:
        model = ChatGoogleGenerativeAI(model="gemini-fake", api_key="test",
                                       base_url=server.url, streaming=True)
        ...
    ```

    Answer `ChatReply.error(503, retry_after=1.0)` for Gemini's "overloaded".
    """

    wire = "gemini"
    exchange = GeminiExchange

    def _routes(self) -> list[BaseRoute]:
        from starlette.routing import Route

        # `{model}:generateContent` is one path segment: the route takes both methods
        return [Route("/{version}/models/{call}", self._endpoint(), methods=["POST"])]
