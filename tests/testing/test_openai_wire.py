"""The OpenAI wire format of the fake server, read raw with httpx: SSE framing, chunk objects,
and the 400 for a body that is not a JSON object."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from langgraph_deadline.testing import ChatReply, FakeOpenAIServer
from langgraph_deadline.testing._chat_server import parse_body

MARGIN = 0.5  # generous: a loaded 2-core machine


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def test_raw_sse_format_and_bad_requests(server: FakeOpenAIServer) -> None:
    server.enqueue(ChatReply.text("a b", chunk_interval=0.0))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=server.base_url) as client:
        streamed = client.post("/chat/completions", json=body)
        bad = client.post("/chat/completions", content=b"{not json")
        models = client.get("/models")
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "a"},
        {"content": " b"},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert bad.status_code == 400 and "invalid JSON" in bad.json()["error"]["message"]
    assert models.json()["data"][0]["id"] == "fake-model"
    assert server.pending_replies == 0  # the bad request did not consume the script
    assert server.wait_idle(MARGIN)
    assert [(r.status, r.chunks_sent) for r in server.requests] == [(200, 2), (400, 0)]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", ({}, None)),
        (b'{"stream": true}', ({"stream": True}, None)),
        (b"[1, 2]", ({}, "the body is not a JSON object")),
    ],
)
def test_a_body_is_a_json_object_or_says_why_not(
    raw: bytes, expected: tuple[dict[str, object], str | None]
) -> None:
    assert parse_body(raw) == expected


def test_broken_json_says_where_it_broke() -> None:
    body, why = parse_body(b"{not json")
    assert body == {} and why is not None and "line 1" in why
