from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Overwrite

from langgraph_deadline import (
    Deadline,
    DeadlineState,
    Outcome,
    StepRecord,
    Terminal,
    deadline_input,
)
from langgraph_deadline._graph.state import merge_deadline, merge_outcome, merge_trace
from langgraph_deadline.types import StepStatus


def _record(name: str = "n") -> StepRecord:
    return StepRecord(
        name=name,
        kind="node",
        attempt=1,
        remaining_ms=100.0,
        requested_ms=None,
        allocated_ms=100.0,
        clamped=True,
        elapsed_ms=3.0,
        status=StepStatus.COMPLETED,
    )


def test_deadline_reducer_is_none_aware_and_earliest_wins() -> None:
    assert merge_deadline(None, None) is None
    early, late = 1_800_000_003.0, 1_800_000_005.0  # epoch seconds
    assert merge_deadline(None, late) == late
    assert merge_deadline(late, None) == late
    assert merge_deadline(late, early) == early
    assert merge_deadline(early, late) == early
    d = Deadline.after(10)
    assert merge_deadline(None, d) == d.timestamp


def test_outcome_reducer_keeps_the_first_terminal_and_none_clears() -> None:
    first = Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step="a")
    second = Outcome(terminal=Terminal.FAILED, step="b")
    assert merge_outcome(None, first) is first
    assert merge_outcome(first, second) is first
    assert merge_outcome(first, None) is None
    assert merge_outcome(None, first.to_dict()) == first


def test_trace_reducer_appends() -> None:
    assert merge_trace([], [_record("a")]) == [_record("a")]
    assert merge_trace([_record("a")], [_record("b").to_dict()]) == [_record("a"), _record("b")]


def test_records_round_trip_as_plain_data() -> None:
    rec = _record()
    assert StepRecord.from_dict(rec.to_dict()) == rec
    out = Outcome(terminal=Terminal.CANCELLED, step="x", reason="user", elapsed_ms=1.0)
    assert Outcome.from_dict(out.to_dict()) == out


class State(DeadlineState):
    n: int


def _graph() -> Any:
    def node(state: State) -> dict[str, Any]:
        return {"n": state["n"] + 1, "deadline_trace": [_record()], "deadline": 1.0e10}

    b = StateGraph(State)
    b.add_node("node", node)
    b.add_edge(START, "node")
    b.add_edge("node", END)
    return b.compile()


def test_fields_flow_through_a_real_graph_and_nodes_cannot_extend_the_deadline() -> None:
    d = Deadline.after(30)
    out = _graph().invoke({"n": 1, **deadline_input(d)})
    assert out["n"] == 2
    assert out["deadline"] == d.timestamp  # the node's later deadline lost
    assert out["deadline_outcome"] is None
    assert out["deadline_trace"] == [_record()]


def test_deadline_input_replaces_the_old_deadline_and_clears_outcome_and_trace() -> None:
    update = deadline_input(5)
    assert isinstance(update["deadline"], Overwrite)
    assert update["deadline_outcome"] is None
    with pytest.raises(ValueError, match="deadline"):
        deadline_input(-1)


def test_checkpoint_values_are_plain_data_that_load_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langgraph_deadline._graph.state import (
        OutcomeChannel,
        TraceChannel,
        merge_outcome,
        merge_trace,
    )

    serde = JsonPlusSerializer()
    outcome_ch = OutcomeChannel(type(None), merge_outcome)
    outcome_ch.update([Outcome(terminal=Terminal.DEADLINE_EXCEEDED, step="a")])
    trace_ch = TraceChannel(list, merge_trace)
    trace_ch.update([[_record()]])
    with caplog.at_level(logging.WARNING):
        for ch in (outcome_ch, trace_ch):
            blob = serde.dumps_typed(ch.checkpoint())
            back = ch.from_checkpoint(serde.loads_typed(blob)).get()
            assert back == ch.get()
    assert "unregistered" not in caplog.text


def test_sqlite_round_trip_under_strict_msgpack_without_warnings(tmp_path: Any) -> None:
    """LANGGRAPH_STRICT_MSGPACK is read at import time: check it in a fresh interpreter."""
    script = textwrap.dedent(
        f"""
        import logging, sqlite3, sys
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
        from typing import Any
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph_deadline import DeadlineState, Terminal, with_deadlines

        class S(DeadlineState):
            n: int

        def node(state: S) -> dict[str, Any]:
            return {{"n": state["n"] + 1}}

        b = StateGraph(S)
        b.add_node("node", node)
        b.add_edge(START, "node")
        b.add_edge("node", END)
        cfg = {{"configurable": {{"thread_id": "t"}}}}
        conn = sqlite3.connect({str(tmp_path / "cp.sqlite")!r}, check_same_thread=False)
        g = with_deadlines(b, timeout=30, checkpointer=SqliteSaver(conn))
        out = g.invoke({{"n": 1}}, cfg)
        assert out["deadline_outcome"].terminal is Terminal.COMPLETED
        conn.close()
        conn = sqlite3.connect({str(tmp_path / "cp.sqlite")!r}, check_same_thread=False)
        g = with_deadlines(b, timeout=30, checkpointer=SqliteSaver(conn))
        values = g.get_state(cfg).values
        assert values["n"] == 2, values
        assert isinstance(values["deadline"], float)
        assert values["deadline_trace"][0].name == "node"
        print("OK")
        """
    )
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OK", proc.stdout


T0 = 1_800_000_000.0  # an epoch second (2027)


def test_a_finished_runs_deadline_is_over_and_the_next_one_replaces_it() -> None:
    from langgraph_deadline._graph.state import DeadlineChannel

    ch = DeadlineChannel(type(None), merge_deadline)
    ch.update([T0 + 100.0])
    ch.update([T0 + 200.0])
    assert ch.get() == T0 + 100.0  # within a run: earliest wins
    assert ch.finish() is True  # the run finished (LangGraph tells the channels)
    assert ch.finish() is False
    assert ch.get() == T0 + 100.0  # still visible
    saved = JsonPlusSerializer().loads_typed(JsonPlusSerializer().dumps_typed(ch.checkpoint()))
    assert saved == {"at": T0 + 100.0, "over": True}
    loaded = ch.from_checkpoint(saved)
    assert loaded.get() == T0 + 100.0 and loaded.copy().over
    loaded.update([T0 + 300.0])  # the next run's deadline
    assert loaded.get() == T0 + 300.0 and not loaded.over
    loaded.update([T0 + 400.0])
    assert loaded.get() == T0 + 300.0


def test_an_older_checkpoint_with_a_bare_timestamp_still_loads() -> None:
    from langgraph_deadline._graph.state import DeadlineChannel

    ch = DeadlineChannel(type(None), merge_deadline).from_checkpoint(T0 + 123.0)
    assert ch.get() == T0 + 123.0 and not ch.over
