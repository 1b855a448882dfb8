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
