"""Retries of a tool call inside its budget: a write is not retried once its request may have
left, unless it has an idempotency key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_deadline import (
    DeadlineExceeded,
    DeadlineState,
    Retries,
    StepRecord,
    deadline_scope,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline._core.step import StepResult
from langgraph_deadline._tools.policy import Tries, account, call_config, is_timeout, is_transport
from langgraph_deadline.testing import SlowServer
from langgraph_deadline.types import StepStatus
from tests.chat_models import tool_calls


class Msgs(MessagesState, DeadlineState):
    pass


def _post_tool(
    server: SlowServer, *, attempts: int = 3, idempotency_key: Any = None, min_viable: float = 0.0
) -> Any:
    retries = Retries(httpx.HTTPStatusError, attempts=attempts, idempotency_key=idempotency_key)

    @deadline_tool(cap=3, side_effect=True, retries=retries, min_viable=min_viable)
    def refund(order_id: str, config: RunnableConfig) -> str:
        """Refund an order."""
        key = (config.get("metadata") or {}).get("idempotency_key", "")
        r = httpx.post(server.url(f"/slow?delay=0&status=503&key={key}"), timeout=5)
        r.raise_for_status()
        return "refunded"

    return refund


@pytest.mark.anyio
async def test_a_write_tool_is_not_retried_once_its_request_may_have_left(
    slow_server: SlowServer,
) -> None:

    refund = _post_tool(slow_server)
    b = StateGraph(Msgs)
    b.add_node("tools", ToolNode([refund], handle_tool_errors=True))
    b.add_edge(START, "tools")
    out = await with_deadlines(b, timeout=5).ainvoke(
        {"messages": [tool_calls(("refund", {"order_id": "42"}))]}
    )
    assert len(slow_server.requests) == 1  # never sent twice
    assert out["messages"][-1].status == "error"
    rec: StepRecord = next(r for r in out["deadline_trace"] if r.name == "refund" and r.attempt)
    calls = [r for r in out["deadline_trace"] if r.kind == "tool" and r.name == "refund"]
    assert any(r.side_effect_started for r in calls), calls
    assert rec.kind == "tool"


def test_a_write_tool_with_an_idempotency_key_is_retried_with_the_same_key(
    slow_server: SlowServer,
) -> None:
    refund = _post_tool(
        slow_server, attempts=3, idempotency_key=lambda a: f"refund-{a['order_id']}"
    )
    with pytest.raises(httpx.HTTPStatusError):
        refund.invoke({"order_id": "42"})
    assert len(slow_server.requests) == 3
    assert {r.query["key"] for r in slow_server.requests} == {"refund-42"}


def test_the_idempotency_key_is_made_once_for_every_try_of_a_call(slow_server: SlowServer) -> None:
    made: list[str] = []

    def key(args: dict[str, Any]) -> str:  # a key drawn afresh each time, as uuid4() would be
        made.append(f"refund-{args['order_id']}-{len(made)}")
        return made[-1]

    refund = _post_tool(slow_server, attempts=3, idempotency_key=key)
    with pytest.raises(httpx.HTTPStatusError):
        refund.invoke({"order_id": "42"})
    assert len(slow_server.requests) == 3
    assert made == ["refund-42-0"]
    assert {r.query["key"] for r in slow_server.requests} == {"refund-42-0"}


@pytest.mark.anyio
async def test_a_refused_call_never_calls_the_idempotency_key_function(
    slow_server: SlowServer,
) -> None:
    made: list[Any] = []
    refund = _post_tool(slow_server, idempotency_key=made.append, min_viable=1.0)
    async with deadline_scope(0.5):
        msg = await refund.ainvoke(
            {"type": "tool_call", "id": "c", "name": "refund", "args": {"order_id": "42"}}
        )
    assert msg.artifact["langgraph_deadline"]["status"] == "skipped"
    assert made == [] and slow_server.requests == []


def test_a_read_tool_retries_within_its_budget(slow_server: SlowServer) -> None:
    hits = [0]

    @deadline_tool(cap=2, retries=Retries(httpx.HTTPStatusError, attempts=3))
    def status(order_id: str) -> str:
        """Order status."""
        hits[0] += 1
        code = 503 if hits[0] < 2 else 200
        r = httpx.get(slow_server.url(f"/slow?delay=0&status={code}"), timeout=5)
        r.raise_for_status()
        return "shipped"

    assert status.invoke({"order_id": "42"}) == "shipped"
    assert len(slow_server.requests) == 2


def _result(status: StepStatus, error: BaseException | None = None) -> StepResult[Any]:
    return StepResult(_record(status), None, error)


def _record(status: StepStatus) -> StepRecord:
    return StepRecord(
        name="refund",
        kind="tool",
        attempt=1,
        remaining_ms=None,
        requested_ms=None,
        allocated_ms=None,
        clamped=False,
        elapsed_ms=1.0,
        status=status,
    )


def test_the_record_says_a_side_effect_may_have_started_unless_the_request_never_left() -> None:
    sent = account(
        _result(StepStatus.FAILED, httpx.ReadError("x")), Tries(started=2), side_effect=True
    )
    assert (sent.record.attempt, sent.record.side_effect_started) == (2, True)
    not_sent = account(
        _result(StepStatus.FAILED, httpx.ConnectError("x")), Tries(started=1), side_effect=True
    )
    assert not_sent.record.side_effect_started is False
    read = _result(StepStatus.COMPLETED)
    assert account(read, Tries(started=1), side_effect=False) is read


def test_timeouts_and_transport_errors_are_told_apart_from_other_errors() -> None:
    assert is_timeout(_result(StepStatus.ABANDONED))
    assert is_timeout(_result(StepStatus.FAILED, DeadlineExceeded("late")))
    assert not is_timeout(_result(StepStatus.FAILED, ValueError("bad")))
    assert is_transport(_result(StepStatus.FAILED, ConnectionError("down")))
    assert not is_transport(_result(StepStatus.FAILED, ValueError("bad")))


def test_the_idempotency_key_reaches_the_tool_in_its_config_metadata() -> None:
    cfg: RunnableConfig = {"metadata": {"user": "u"}, "tags": ["t"]}
    assert call_config(cfg, None) is cfg
    assert call_config(cfg, "refund-42") == {
        "metadata": {"user": "u", "idempotency_key": "refund-42"},
        "tags": ["t"],
    }
