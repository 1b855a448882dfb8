"""A local OpenAI-compatible chat server that streams slowly and reports what it sent, and when.

`ChatOpenAI(base_url=server.base_url, api_key="test")` talks to it for real (HTTP over loopback,
the OpenAI SDK's own SSE parsing and retries). The test scripts the replies -- text, tool calls,
errors, a slow first byte -- and afterwards asks the server the questions a deadline test must
ask: did the client go away, when, and how many token chunks were sent after a given instant?

The server and its responses are `ChatServer` and `Exchange` (`_chat_server.py`), here in the
OpenAI wire format: the JSON completion or the SSE stream of chunks, the JSON errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._chat_server import ARGUMENT_PIECE, ChatServer, Exchange

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

__all__ = ["FakeOpenAIServer", "OpenAIExchange", "invalid_messages"]


class OpenAIExchange(Exchange):
    """One response in the OpenAI chat completions format."""

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_exceeded",
        }.get(status, "server_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": kind}}

    def _usage(self, prompt: int, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _answer(
        self, text: str, calls: list[tuple[str, str, str]], cut: bool, n_tokens: int
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text or (None if calls else ""),
            "refusal": None,
        }
        if calls:
            message["tool_calls"] = [
                {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
                for id_, name, args in calls
            ]
        return {
            "id": f"chatcmpl-{self.completion_id}",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "length" if cut else "tool_calls" if calls else "stop",
                }
            ],
            "usage": self._usage(self._prompt_tokens(), n_tokens),
        }

    def _event(
        self, delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None
    ) -> bytes:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        chunk: dict[str, Any] = {
            "id": f"chatcmpl-{self.completion_id}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = usage
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    @property
    def include_usage(self) -> bool:
        options = self.rec.body.get("stream_options")
        return isinstance(options, dict) and bool(options.get("include_usage"))

    def _opener(self, calls: list[tuple[str, str, str]]) -> bytes:
        return self._event(
            {"role": "assistant", "content": None if calls and not self.tokens else ""}
        )

    def _chunks(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        deltas: list[dict[str, Any]] = [{"content": token} for token in self.tokens]
        for i, (id_, name, args) in enumerate(calls):
            head = {"index": i, "id": id_, "type": "function"}
            deltas.append({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
            for p in range(0, len(args), ARGUMENT_PIECE):
                piece = args[p : p + ARGUMENT_PIECE]
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        return [self._event(delta) for delta in deltas]

    def _tail(self, calls: list[tuple[str, str, str]], sent: int, cut: bool) -> bytes:
        tail = self._event({}, "length" if cut else "tool_calls" if calls else "stop")
        if self.include_usage:
            tail += self._event(None, usage=self._usage(self._prompt_tokens(), sent))
        return tail + b"data: [DONE]\n\n"


class FakeOpenAIServer(ChatServer):
    """An OpenAI-compatible `POST /v1/chat/completions` on loopback, in a background thread.

    ```python
    with FakeOpenAIServer([ChatReply.counting(100)], chunk_interval=0.05) as server:
        model = ChatOpenAI(base_url=server.base_url, api_key="test", streaming=True)
        ...  # cancel the call after 0.5 s
        assert server.wait_disconnected(1.0)
        assert server.chunks_sent_after(server.requests[0].disconnected) == 0
    ```

    Replies are served in order, one per request (retries included); when the script runs out,
    `default_reply` is served. As OpenAI does, a request whose `messages` leave a tool call
    unanswered (or answer one never made) is refused with a 400, without using the script.
    A reply made with `follows_length_hint=True` keeps to a length its request's system message
    asks for ("at most N words": the length hint), a stand-in for a model obeying its length
    budget (`ChatReply`).
    Works with `with` and `async with`; the `await_*` helpers wait without blocking the event
    loop (use them in async tests: the client you just cancelled may need the loop to close
    its socket). Its siblings speak other providers' protocols: `FakeAnthropicServer`,
    `FakeOllamaServer`, `FakeGeminiServer`, `FakeBedrockServer`.
    """

    exchange = OpenAIExchange

    @property
    def base_url(self) -> str:
        """For `ChatOpenAI(base_url=...)` / `openai.OpenAI(base_url=...)`: ends in `/v1` (a
        port no earlier server of the process had: see `url`)."""
        return f"http://{self.host}:{self.port}/v1"

    def _routes(self) -> list[BaseRoute]:
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def models(_request: Any) -> JSONResponse:
            data = [{"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}]
            return JSONResponse({"object": "list", "data": data})

        return [
            Route("/v1/chat/completions", self._endpoint(), methods=["POST"]),
            # Groq's SDK posts OpenAI's wire format under its own prefix (`ChatGroq(base_url=url)`)
            Route("/openai/v1/chat/completions", self._endpoint(), methods=["POST"]),
            # and Azure OpenAI's, per deployment (`AzureChatOpenAI(azure_endpoint=url, ...)`)
            Route(
                "/openai/deployments/{deployment}/chat/completions",
                self._endpoint(),
                methods=["POST"],
            ),
            Route("/v1/models", models, methods=["GET"]),
        ]

    def _refusal(self, body: Mapping[str, Any]) -> str | None:
        return invalid_messages(body)  # as OpenAI refuses a history


def invalid_messages(body: Mapping[str, Any]) -> str | None:
    """Why OpenAI would refuse the body's `messages` with a 400, as it words it, or None.

    The history rules a real provider checks: an assistant message with `tool_calls` is
    followed by a `tool` message answering each call, before any other message; a `tool`
    message answers a call of the assistant message before it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    open_calls: dict[str, int] = {}  # an open call's id -> the index of the message that made it
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                return (
                    f"Invalid parameter: messages.[{i}]: messages with role 'tool' must be a "
                    "response to a preceeding message with 'tool_calls'."
                )
            del open_calls[message["tool_call_id"]]
            continue
        if open_calls:
            return _unanswered(open_calls)
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                    open_calls[call["id"]] = i
    return _unanswered(open_calls) if open_calls else None


def _unanswered(open_calls: Mapping[str, int]) -> str:
    return (
        f"messages.[{min(open_calls.values())}]: An assistant message with 'tool_calls' must be "
        "followed by tool messages responding to each 'tool_call_id'. The following "
        f"tool_call_ids did not have response messages: {', '.join(open_calls)}"
    )
