"""What the server records of a request: the SDK headers it reads and the chunk counts."""

from __future__ import annotations

from langgraph_deadline.testing import ChatReply, ServedChatRequest
from langgraph_deadline.testing._chat_record import disconnects


def _request(headers: dict[str, str] | None = None) -> ServedChatRequest:
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return ServedChatRequest(0, 10.0, body, headers or {}, ChatReply.text("a b"))


def test_the_request_reads_its_body_and_the_sdk_headers() -> None:
    rec = _request({"x-stainless-retry-count": "2", "x-stainless-read-timeout": "1.5"})
    assert (rec.stream, rec.messages, rec.model) == (True, 1, "m")
    assert (rec.retry_count, rec.read_timeout) == (2, 1.5)


def test_missing_or_garbled_sdk_headers_mean_a_first_attempt_without_timeout() -> None:
    assert (_request().retry_count, _request().read_timeout) == (0, None)
    garbled = _request({"x-stainless-retry-count": "x", "x-stainless-read-timeout": "y"})
    assert (garbled.retry_count, garbled.read_timeout) == (0, None)


def test_chunks_after_an_instant_and_when_a_request_is_open() -> None:
    rec = _request()
    rec.chunk_times += [11.0, 12.0, 13.0]
    assert rec.open and rec.chunks_sent == 3 and rec.chunks_sent_after(12.0) == 1
    rec.disconnected = 13.5
    assert not rec.open and disconnects([rec, _request()]) == 1


def test_each_protocol_has_its_limit_and_its_stream_where_its_provider_puts_them() -> None:
    reply = ChatReply.text("a")

    def served(wire: str, body: dict[str, object], path: str = "/") -> ServedChatRequest:
        return ServedChatRequest(0, 1.0, body, {}, reply, path=path, wire=wire)  # type: ignore[arg-type]

    assert served("openai", {"max_completion_tokens": 5, "max_tokens": 9}).max_tokens == 5
    assert served("anthropic", {"max_tokens": 7, "stream": True}).max_tokens == 7
    assert served("ollama", {"options": {"num_predict": 3}}).max_tokens == 3
    assert served("ollama", {"options": {"num_predict": -1}}).max_tokens is None  # unlimited
    assert served("gemini", {"generationConfig": {"maxOutputTokens": 4}}).max_tokens == 4
    assert served("bedrock", {"inferenceConfig": {"maxTokens": 6}}).max_tokens == 6
    assert served("ollama", {}).stream and not served("ollama", {"stream": False}).stream
    assert served("gemini", {}, "/v1beta/models/g:streamGenerateContent").stream
    assert not served("gemini", {}, "/v1beta/models/g:generateContent").stream
    assert served("bedrock", {}, "/model/m/converse-stream").stream
    assert not served("bedrock", {}, "/model/m/converse").stream
    assert served("gemini", {"contents": [{}, {}]}).messages == 2
    assert served("gemini", {}, "/").read_timeout is None
    timed = ServedChatRequest(0, 1.0, {}, {"x-server-timeout": "2"}, reply, wire="gemini")
    assert timed.read_timeout == 2.0


def test_an_aws_event_stream_message_is_framed_as_botocore_reads_it() -> None:
    from botocore.eventstream import EventStreamBuffer

    from langgraph_deadline.testing._bedrock_server import event_message

    buffer = EventStreamBuffer()
    buffer.add_data(event_message({":event-type": "messageStop"}, b'{"stopReason": "end_turn"}'))
    (message,) = list(buffer)
    assert message.headers == {":event-type": "messageStop"}
    assert message.payload == b'{"stopReason": "end_turn"}'
