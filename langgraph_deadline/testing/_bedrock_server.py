"""A local server speaking AWS Bedrock's Converse API (`POST /model/{modelId}/converse` and
`/converse-stream`): the JSON answer, or a stream of events in AWS's binary event-stream
framing (`messageStart`, `contentBlockDelta`, ..., `metadata`), and AWS's JSON errors (the
`x-amzn-ErrorType` header: 429 `ThrottlingException`, 503 `ServiceUnavailableException`).

`ChatBedrockConverse(model=..., endpoint_url=server.url, region_name="us-east-1",
aws_access_key_id="test", aws_secret_access_key="test")` talks to it for real: botocore's own
signing, parsing and retries. The request's `inferenceConfig.maxTokens` cuts the answer
(`stopReason` `"max_tokens"`). The rest is `ChatServer` (`_chat_server.py`).
"""

from __future__ import annotations

import binascii
import json
import struct
from typing import TYPE_CHECKING, Any, ClassVar

from ._chat_server import ARGUMENT_PIECE, ChatServer, Exchange

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

__all__ = ["BedrockExchange", "FakeBedrockServer", "event_message"]

_ERRORS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One message of AWS's event stream: its length, its headers' length and their CRC, the
    headers (string-valued), the payload, and the CRC of all that."""
    head = b""
    for name, value in headers.items():
        raw = value.encode()
        head += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack(">I", binascii.crc32(message))


def _event(kind: str, data: dict[str, Any]) -> bytes:
    headers = {
        ":event-type": kind,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return event_message(headers, json.dumps(data).encode())


class BedrockExchange(Exchange):
    """One response in the Converse format: a text block (when the reply says something), then
    a `toolUse` block per tool call."""

    stream_type: ClassVar[str] = "application/vnd.amazon.eventstream"

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"__type": _ERRORS.get(status, "InternalServerException"), "message": message}

    def _error_headers(self, status: int) -> dict[str, str]:
        return {"x-amzn-errortype": _ERRORS.get(status, "InternalServerException")}

    def _stop_reason(self, calls: list[tuple[str, str, str]], cut: bool) -> str:
        return "max_tokens" if cut else "tool_use" if calls else "end_turn"

    def _usage(self, n_tokens: int) -> dict[str, int]:
        prompt = self._prompt_tokens()
        return {"inputTokens": prompt, "outputTokens": n_tokens, "totalTokens": prompt + n_tokens}

    def _answer(
        self, text: str, calls: list[tuple[str, str, str]], cut: bool, n_tokens: int
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"text": text}] if text else []
        content += [
            {"toolUse": {"toolUseId": id_, "name": name, "input": json.loads(args or "{}")}}
            for id_, name, args in calls
        ]
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self._stop_reason(calls, cut),
            "usage": self._usage(n_tokens),
            "metrics": {"latencyMs": 1},
        }

    def _opener(self, calls: list[tuple[str, str, str]]) -> bytes:
        return _event("messageStart", {"role": "assistant"})

    def _chunks(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        """A text delta per token; a tool call's block starts with its first piece of JSON
        (closing the block before it), and each piece is a chunk."""
        chunks = [
            _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": token}})
            for token in self.tokens
        ]
        self.blocks = [0] * len(chunks)  # the block each chunk belongs to
        index = 1 if self.tokens else 0
        for id_, name, args in calls:
            start = _event(
                "contentBlockStart",
                {
                    "contentBlockIndex": index,
                    "start": {"toolUse": {"toolUseId": id_, "name": name}},
                },
            )
            if index > 0:
                start = _event("contentBlockStop", {"contentBlockIndex": index - 1}) + start
            pieces = [args[p : p + ARGUMENT_PIECE] for p in range(0, len(args), ARGUMENT_PIECE)]
            for n, piece in enumerate(pieces or [""]):
                delta = {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}
                event = _event("contentBlockDelta", delta)
                chunks.append(start + event if n == 0 else event)
                self.blocks.append(index)
            index += 1
        return chunks

    def _tail(self, calls: list[tuple[str, str, str]], sent: int, cut: bool) -> bytes:
        tail = b""
        if sent:
            tail = _event("contentBlockStop", {"contentBlockIndex": self.blocks[sent - 1]})
        tail += _event("messageStop", {"stopReason": self._stop_reason(calls, cut)})
        metadata = {"usage": self._usage(sent), "metrics": {"latencyMs": 1}}
        return tail + _event("metadata", metadata)


class FakeBedrockServer(ChatServer):
    """AWS Bedrock's Converse and ConverseStream on loopback, in a background thread:
    `FakeOpenAIServer` in the Converse wire format (same script, same questions afterwards).

    ```python
    with FakeBedrockServer([ChatReply.counting(100)], chunk_interval=0.05) as server:
        model = ChatBedrockConverse(
            model="anthropic.claude-3-haiku-20240307-v1:0", endpoint_url=server.url,
            region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
        ...
    ```

    Answer `ChatReply.error(503)` for "ServiceUnavailableException", 429 for throttling.
    """

    wire = "bedrock"
    exchange = BedrockExchange

    def _routes(self) -> list[BaseRoute]:
        from starlette.routing import Route

        return [Route("/model/{model_id}/{call}", self._endpoint(), methods=["POST"])]
