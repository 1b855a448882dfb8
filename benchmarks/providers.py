"""Every model provider users run: does the deadline hold for each, async and sync?

Each family's real LangChain chat model class, with its own SDK client and that SDK's defaults
(retries included), pointed at the testing kit's loopback server for its wire protocol
(`FakeOpenAIServer` for OpenAI, Azure OpenAI, Mistral, Groq and LiteLLM's OpenAI route;
`FakeAnthropicServer`, `FakeGeminiServer`, `FakeOllamaServer`, `FakeBedrockServer`). One run
at a time, each with a `DEADLINE` s deadline, in four cases:

- slow: the answer streams 200 tokens, one every 20 ms (4 s): it is cut at the deadline;
- hang: the server reads the request and never answers;
- overload: every attempt is answered overloaded (Anthropic 529, the others 503) with
  `retry-after: 0.3`, and the run waits until `SETTLE` s after its start for any SDK retry;
- limit: a 200-token answer at 2 ms a token with `tokens_per_second=20` and a 1 s deadline: the
  call must complete, its token limit sent under the provider's own parameter.

The runs rotate over the three documented ways (a `with_deadlines` node calling the plain model,
`budgeted_model(model)`, `create_agent(..., middleware=[DeadlineMiddleware(...)])`), called with
`ainvoke` (the node streams with `astream` in the slow case) or with `invoke` (`stream`).

Measured from the server: when it saw the connection close, what it sent and which requests
arrived after the deadline. The deadline is taken as the call's start plus `DEADLINE`: the run
sets its own a little later, so every "after the deadline" figure here is an upper bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from pydantic import SecretStr

from langgraph_deadline import DeadlineExceeded, DeadlineState, budgeted_model, with_deadlines
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits
from langgraph_deadline.testing import (
    ChatReply,
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeOllamaServer,
    FakeOpenAIServer,
)
from langgraph_deadline.testing._chat_server import ChatServer

from ._common import Check, Section, Table, percentile

__all__ = ["run"]

DEADLINE = 0.5
SETTLE = 2.3  # google-genai backs off 1 to 2 s (it ignores retry-after); the others 0.3 s, twice
RUNS = {"slow": 15, "hang": 15, "overload": 6, "limit": 6}
QUICK_RUNS = {"slow": 3, "hang": 3, "overload": 1, "limit": 1}
WAIT_CLOSED = 1.0  # how long the server is watched for the close after a run returned
CLOSE_TARGET_MS = 50.0


@dataclasses.dataclass(frozen=True, slots=True)
class Family:
    """A provider family: its loopback server, its model for that server, its overload status."""

    name: str
    server: type[ChatServer]
    make: Callable[[ChatServer, bool], BaseChatModel]  # (server, streaming)
    overloaded: int = 503


def _openai(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=f"{s.url}/v1", api_key=SecretStr("t"), model="gpt-bench", streaming=streaming
    )


def _azure(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_openai import AzureChatOpenAI

    return AzureChatOpenAI(
        azure_endpoint=s.url,
        azure_deployment="gpt-bench",
        api_version="2024-10-21",
        api_key=SecretStr("t"),
        streaming=streaming,
    )


def _anthropic(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(  # type: ignore[call-arg]
        base_url=s.url, api_key=SecretStr("t"), model="claude-bench", streaming=streaming
    )


def _ollama(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_ollama import ChatOllama

    return ChatOllama(base_url=s.url, model="llama-bench")  # (it always streams its calls)


def _gemini(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_google_genai import ChatGoogleGenerativeAI

    return ChatGoogleGenerativeAI(
        base_url=s.url, api_key=SecretStr("t"), model="gemini-bench", streaming=streaming
    )


def _mistral(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_mistralai import ChatMistralAI

    return ChatMistralAI(  # type: ignore[call-arg]
        endpoint=f"{s.url}/v1", api_key=SecretStr("t"), model="mistral-bench", streaming=streaming
    )


def _bedrock(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_aws import ChatBedrockConverse

    model = ChatBedrockConverse(  # type: ignore[call-arg]
        model="anthropic.claude-3-haiku-20240307-v1:0",
        endpoint_url=s.url,
        region_name="us-east-1",
        aws_access_key_id=SecretStr("t"),
        aws_secret_access_key=SecretStr("t"),
    )
    return model.model_copy(update={"disable_streaming": not streaming})


def _groq(s: ChatServer, streaming: bool) -> BaseChatModel:
    from langchain_groq import ChatGroq

    return ChatGroq(base_url=s.url, api_key=SecretStr("t"), model="groq-bench", streaming=streaming)


def _litellm(s: ChatServer, streaming: bool) -> BaseChatModel:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # (no fetch at import)
    import litellm
    from langchain_litellm import ChatLiteLLM

    litellm.suppress_debug_info = True  # (its "Give Feedback" banner on every error)
    return ChatLiteLLM(
        model="openai/gpt-bench", api_base=f"{s.url}/v1", api_key="t", streaming=streaming
    )


FAMILIES = (
    Family("OpenAI", FakeOpenAIServer, _openai),
    Family("Azure OpenAI", FakeOpenAIServer, _azure),
    Family("Anthropic", FakeAnthropicServer, _anthropic, overloaded=529),
    Family("Gemini", FakeGeminiServer, _gemini),
    Family("Bedrock Converse", FakeBedrockServer, _bedrock),
    Family("Ollama", FakeOllamaServer, _ollama),
    Family("Mistral", FakeOpenAIServer, _mistral),
    Family("Groq", FakeOpenAIServer, _groq),
    Family("LiteLLM", FakeOpenAIServer, _litellm),
)

# -- the three documented ways, async and sync ----------------------------------------------------


class _State(DeadlineState, total=False):
    text: str


def _one_node(body: Callable[..., Any], timeout: float) -> Any:
    builder = StateGraph(_State).add_node("answer", body)
    return with_deadlines(
        builder.add_edge(START, "answer").add_edge("answer", END), timeout=timeout
    )


def _text(answer: Any) -> str:
    return answer.text if isinstance(answer, AIMessage) else str(getattr(answer, "content", ""))


async def _acall(way: str, model: BaseChatModel, timeout: float, stream: bool, tps: Any) -> Any:
    if way == "agent":
        mw = DeadlineMiddleware(timeout=timeout, model_limits=ModelLimits(tokens_per_second=tps))
        return await create_agent(model, [], middleware=[mw]).ainvoke(
            {"messages": [HumanMessage("count")]}
        )
    llm: Any = budgeted_model(model, tokens_per_second=tps) if way == "budgeted" else model

    async def answer(state: _State) -> dict[str, Any]:
        if stream and way == "node":
            parts = [chunk.text async for chunk in llm.astream("count")]
            return {"text": "".join(parts)}
        return {"text": _text(await llm.ainvoke("count"))}

    return await _one_node(answer, timeout).ainvoke({})


def _call(way: str, model: BaseChatModel, timeout: float, stream: bool, tps: Any) -> Any:
    if way == "agent":
        mw = DeadlineMiddleware(timeout=timeout, model_limits=ModelLimits(tokens_per_second=tps))
        return create_agent(model, [], middleware=[mw]).invoke(
            {"messages": [HumanMessage("count")]}
        )
    llm: Any = budgeted_model(model, tokens_per_second=tps) if way == "budgeted" else model

    def answer(state: _State) -> dict[str, Any]:
        if stream and way == "node":
            return {"text": "".join(chunk.text for chunk in llm.stream("count"))}
        return {"text": _text(llm.invoke("count"))}

    graph = _one_node(answer, timeout)
    if stream:
        *_, last = graph.stream({}, stream_mode="values")
        return last
    return graph.invoke({})


WAYS = ("node", "budgeted", "agent")
LIMIT_WAYS = ("budgeted", "agent")  # (the plain model in a node gets no token limit)


# -- one run, measured at the server --------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Row:
    """What one family, async or sync, did over its runs."""

    returned: list[float] = dataclasses.field(default_factory=list)  # s after the deadline
    closed: list[float] = dataclasses.field(default_factory=list)  # s after the deadline
    open_after: int = 0  # requests the server still saw open `WAIT_CLOSED` s after the return
    tokens_after: list[int] = dataclasses.field(default_factory=list)
    requests_after: int = 0
    broken: list[str] = dataclasses.field(default_factory=list)
    limits: list[int | None] = dataclasses.field(default_factory=list)


def _reply(case: str, family: Family) -> ChatReply:
    """The reply to every request of a run of `case`, SDK retries included."""
    if case == "slow":
        return ChatReply.counting(200, chunk_interval=0.02)
    if case == "hang":
        return ChatReply.hang()
    if case == "limit":
        return ChatReply.counting(200, chunk_interval=0.002)
    return ChatReply.error(family.overloaded, "Overloaded", retry_after=0.3)


def _once(
    family: Family,
    server: ChatServer,
    row: _Row,
    case: str,
    way: str,
    loop: asyncio.AbstractEventLoop | None,
) -> None:
    """One run of `case` by `way`: with `ainvoke` on `loop`, or with `invoke` when it is None.
    An async run's loop keeps running while the server is watched: asyncio closes a cancelled
    client's socket on its next iteration, as an application's loop would run it."""
    stream = case in ("slow", "limit")
    model = family.make(server, stream)
    timeout, tps = (1.0, 20.0) if case == "limit" else (DEADLINE, None)
    seen = len(server.requests)
    server.default_reply = _reply(case, family)
    t0 = time.monotonic()
    deadline = t0 + timeout
    out: Any = None
    error: BaseException | None = None
    try:
        if loop is None:
            out = _call(way, model, timeout, stream and way == "node", tps)
        else:
            out = loop.run_until_complete(_acall(way, model, timeout, stream, tps))
    except DeadlineExceeded:
        pass
    except Exception as exc:  # an SDK's own error for an overload it gave up on is expected
        error = exc
    returned = time.monotonic()
    outcome = out.get("deadline_outcome") if isinstance(out, dict) else None
    if case == "limit":
        if error is not None or outcome is None or not outcome.ok:
            row.broken.append(f"limit {way}: {error!r}" if error else f"limit {way}: {outcome}")
    elif error is not None and case != "overload":
        row.broken.append(f"{case} {way}: {error!r}")
    else:
        row.returned.append(returned - deadline)
    settled = t0 + SETTLE if case == "overload" else returned  # until any SDK retry has come
    if loop is None:
        time.sleep(max(0.0, settled - time.monotonic()))
        idle = server.wait_idle(WAIT_CLOSED)
    else:
        loop.run_until_complete(asyncio.sleep(max(0.0, settled - time.monotonic())))
        idle = loop.run_until_complete(server.await_idle(WAIT_CLOSED))
    if not idle:
        row.open_after += len(server.open_requests())
    served = server.requests[seen:]
    if case == "limit":
        row.limits.extend(r.max_tokens for r in served)
        return
    row.requests_after += sum(r.started > deadline for r in served)
    row.tokens_after.append(sum(r.chunks_sent_after(deadline) for r in served))
    row.closed += [r.disconnected - deadline for r in served if r.disconnected is not None]


def _warm(family: Family, server: ChatServer, loop: asyncio.AbstractEventLoop) -> None:
    """One untimed call each way, as a warm process has made (litellm imports itself lazily, on
    its first call)."""
    server.default_reply = ChatReply.counting(2)
    family.make(server, False).invoke("hi")
    loop.run_until_complete(family.make(server, False).ainvoke("hi"))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:+.1f}"


def _family(family: Family, runs: dict[str, int]) -> list[tuple[_Row, bool]]:
    """The async row, then the sync row, of one family, against one server."""
    rows: list[tuple[_Row, bool]] = []
    # one loop for the family's async runs (LangChain's provider packages keep a client per
    # base URL, bound to the loop that made it), closed without waiting for the executor's
    # threads (botocore runs on one)
    loop = asyncio.new_event_loop()
    try:
        with family.server() as server:
            _warm(family, server, loop)
            for sync in (False, True):
                row = _Row()
                for case, n in runs.items():
                    ways = LIMIT_WAYS if case == "limit" else WAYS
                    for i in range(n):
                        _once(
                            family, server, row, case, ways[i % len(ways)], None if sync else loop
                        )
                rows.append((row, sync))
    finally:
        loop.close()
    return rows


def run(quick: bool = False) -> Section:
    runs = QUICK_RUNS if quick else RUNS
    table = Table(
        f"Providers: each family's LangChain class against its wire protocol, {DEADLINE} s "
        f"deadline, slow x{runs['slow']} / hang x{runs['hang']} / overload x{runs['overload']} "
        f"/ token limit x{runs['limit']} runs, rotating the three ways",
        (
            "provider",
            "runs (slow, hang, overload)",
            "return - deadline p50 / p99 (ms)",
            "closed at the server - deadline p99 (ms)",
            "left open",
            "tokens after (max)",
            "requests after",
            "token limit sent",
            "broken",
        ),
    )
    rows: list[_Row] = []
    quiet = logging.getLogger("langgraph_deadline")  # (a warning per cut run otherwise)
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for family in FAMILIES:
            for row, sync in _family(family, runs):
                _report(table, family, row, sync=sync)
                rows.append(row)
    finally:
        quiet.setLevel(level)
    table.notes.append(
        "deadline = the call's start + the timeout: the run sets its own a little later, so "
        "every figure after it is an upper bound. Closed: when the server saw the client go "
        "away (hang and slow cases). Left open: requests still open 1 s after the call returned "
        "(after the overload case's wait for retries). Token limit sent: calls whose request "
        "carried the budget's limit under the provider's own parameter (budgeted_model and the "
        "middleware, tokens_per_second=20, 1 s)."
    )
    closed = max(percentile(r.closed, 99) * 1000 for r in rows)
    section = Section(tables=[table])
    section.figures.append(("providers: worst close after the deadline, p99", f"{closed:+.1f} ms"))
    section.checks += [
        Check(
            "providers: closed at the server after the deadline, worst p99",
            closed,
            CLOSE_TARGET_MS,
            " ms",
        ),
        Check(
            "providers: tokens sent after the deadline, worst run",
            max(max(r.tokens_after, default=0) for r in rows),
            1,
            "",
        ),
        Check(
            "providers: requests started after the deadline",
            sum(r.requests_after for r in rows),
            0,
            "",
        ),
        Check(
            "providers: calls broken (an error that is not the deadline's)",
            sum(len(r.broken) for r in rows),
            0,
            "",
        ),
        Check(
            "providers: token limits not sent",
            sum(n is None for r in rows for n in r.limits),
            0,
            "",
        ),
        Check(
            "providers: requests left open 1 s after the return",
            sum(r.open_after for r in rows),
            0,
            "",
        ),
    ]
    return section


def _report(table: Table, family: Family, row: _Row, *, sync: bool) -> None:
    limits = [n for n in row.limits if n is not None]
    table.add(
        f"{family.name} ({'sync' if sync else 'async'})",
        str(len(row.returned) + len(row.broken)),
        f"{_ms(percentile(row.returned, 50))} / {_ms(percentile(row.returned, 99))}",
        _ms(percentile(row.closed, 99)) if row.closed else "-",
        str(row.open_after),
        str(max(row.tokens_after, default=0)),
        str(row.requests_after),
        f"{len(limits)}/{len(row.limits)}" + (f" ({min(limits)}-{max(limits)})" if limits else ""),
        str(len(row.broken)) + (f": {row.broken[0][:80]}" if row.broken else ""),
    )
