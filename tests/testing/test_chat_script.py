"""Scripted replies: what each builder makes, and the bad scripts refused where they are written."""

from __future__ import annotations

import math

import pytest

from langgraph_deadline.testing import ChatReply, ScriptedToolCall


def test_text_is_split_into_words_that_keep_their_leading_space() -> None:
    reply = ChatReply.text("Hello there  world")
    assert reply.tokens == ("Hello", " there", "  world")
    assert reply.content == "Hello there  world" and not reply.is_error


def test_counting_streams_numbers_one_to_n() -> None:
    assert ChatReply.counting(3).tokens == ("1", " 2", " 3")


def test_tool_call_arguments_are_sent_as_json_or_as_given() -> None:
    reply = ChatReply.tool_call("search", {"q": "x"}, text="Let me look")
    (call,) = reply.calls
    assert call.arguments_json == '{"q": "x"}' and reply.tokens == ("Let", " me", " look")
    assert ScriptedToolCall("f", "{broken").arguments_json == "{broken"


def test_errors_and_hangs() -> None:
    limited = ChatReply.rate_limited(retry_after=1.5)
    assert limited.is_error and limited.status == 429 and limited.retry_after == 1.5
    assert math.isinf(ChatReply.hang().delay)


def test_bad_scripts_are_rejected() -> None:
    with pytest.raises(ValueError, match="delay"):
        ChatReply.text("x", delay=-1)
    with pytest.raises(ValueError, match="chunk_interval"):
        ChatReply.text("x", chunk_interval=float("nan"))
    with pytest.raises(ValueError, match="error status"):
        ChatReply.error(302)
    with pytest.raises(ValueError, match="at least one"):
        ChatReply.tool_calls()
    with pytest.raises(ValueError, match="n must be"):
        ChatReply.counting(0)
    with pytest.raises(ValueError, match="no tokens"):
        ChatReply(tokens=("x",), status=500)


def test_a_reply_following_the_length_hint_answers_the_sentences_that_fit() -> None:
    reply = ChatReply.text(
        "One two. Three four five! Six seven eight nine.", follows_length_hint=True
    )

    def asking(text: str, role: str = "system") -> dict[str, object]:
        return {"messages": [{"role": role, "content": text}, {"role": "user", "content": "hi"}]}

    assert reply.tokens_for(asking("Answer in at most 6 words.")) == (
        "One",
        " two.",
        " Three",
        " four",
        " five!",
    )
    assert reply.tokens_for(asking("Answer in at most 4 words.")) == ("One", " two.")
    assert reply.tokens_for(asking("at most 1 words")) == ("One",)  # no sentence fits: cut
    parts = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "At most 20 words."}]
    assert reply.tokens_for({"messages": [{"role": "system", "content": parts}]}) == reply.tokens
    # only a system message asks; a reply not following hints ignores them
    assert reply.tokens_for(asking("Answer in at most 4 words.", role="user")) == reply.tokens
    plain = ChatReply.text("One two. Three four.")
    assert plain.tokens_for(asking("Answer in at most 2 words.")) == plain.tokens
