"""A sync step on a worker thread: it sees the caller's context, and its ends are told apart."""

from __future__ import annotations

import contextvars
import threading

import pytest

from langgraph_deadline import Deadline, DeadlineExceeded, current_deadline
from langgraph_deadline._core.plan import Step
from langgraph_deadline._core.step import run_sync
from langgraph_deadline.types import StepStatus

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_run_sync_var", default="unset")


def test_the_body_runs_on_a_worker_with_the_callers_contextvars_and_its_budget() -> None:
    plan = Step("s", "node", 5.0).plan(sync=True)
    seen: dict[str, object] = {}

    def body() -> str:
        seen["thread"] = threading.get_ident()
        seen["var"] = _VAR.get()
        seen["deadline"] = current_deadline()
        return "done"

    token = _VAR.set("the caller's")
    try:
        result = run_sync(plan, body)
    finally:
        _VAR.reset(token)
    assert result.status is StepStatus.COMPLETED and result.value == "done"
    assert seen["thread"] != threading.get_ident() and seen["var"] == "the caller's"
    deadline = seen["deadline"]  # the step's own: its budget from when it started
    assert isinstance(deadline, Deadline) and 4.0 < deadline.remaining() <= 5.0


def test_the_bodys_errors_are_returned_as_failed() -> None:
    plan = Step("s", "node", 5.0).plan(sync=True)

    def broken() -> None:
        raise ValueError("mine")

    def inner_deadline() -> None:  # a shorter inner scope ran out, with the step's time left
        raise DeadlineExceeded("an inner one")

    for body, kind in ((broken, ValueError), (inner_deadline, DeadlineExceeded)):
        result = run_sync(plan, body)
        assert result.status is StepStatus.FAILED and isinstance(result.error, kind)


def test_a_base_exception_from_the_body_is_raised_in_the_caller() -> None:
    plan = Step("s", "node", 5.0).plan(sync=True)

    def exiting() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        run_sync(plan, exiting)
