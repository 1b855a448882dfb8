"""A pytest plugin that runs LangGraph's own test suite with every graph wrapped by
`with_deadlines(..., timeout=600)`: a deadline nobody reaches, so nothing should change.

Loaded by `run.py` with `-p plugin`; `LGD_SUITE_WRAP=1` turns the wrapping on (off, the plugin
only writes each test's outcome, so the plain and wrapped runs are read the same way), and
`LGD_SUITE_OUT` names the JSON-lines file the outcomes go to.
"""

from __future__ import annotations

import contextvars
import json
import os
from typing import Any

import pytest

TIMEOUT = 600.0
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("lgd_suite_inside", default=False)


def _wrap_state_graphs() -> None:
    from langgraph.graph.state import StateGraph

    from langgraph_deadline import with_deadlines

    compile_plain = StateGraph.compile

    def compile(self: StateGraph[Any, Any, Any, Any], *args: Any, **kwargs: Any) -> Any:
        if _inside.get():  # with_deadlines' own compile
            return compile_plain(self, *args, **kwargs)
        token = _inside.set(True)
        try:
            return with_deadlines(compile_plain(self, *args, **kwargs), timeout=TIMEOUT)
        finally:
            _inside.reset(token)

    StateGraph.compile = compile  # type: ignore[method-assign]


def _wrap_entrypoints() -> None:
    from langgraph.func import entrypoint

    from langgraph_deadline import with_deadlines

    call_plain = entrypoint.__call__

    def call(self: entrypoint[Any], func: Any) -> Any:
        return with_deadlines(call_plain(self, func), timeout=TIMEOUT)

    entrypoint.__call__ = call  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    wrap = os.environ.get("LGD_SUITE_WRAP", "")
    if "graph" in wrap:
        _wrap_state_graphs()
    if "entrypoint" in wrap:
        _wrap_entrypoints()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    out = os.environ.get("LGD_SUITE_OUT")
    if not out:
        return
    if os.environ.get("PYTEST_XDIST_WORKER") is None and hasattr(report, "node"):
        return  # the controller of -n workers: the worker wrote it already
    if report.when == "call" or report.outcome != "passed":
        line = {"id": report.nodeid, "when": report.when, "outcome": report.outcome}
        if report.failed:
            line["error"] = str(report.longrepr).splitlines()[-1][:300] if report.longrepr else ""
        with open(out, "a") as f:
            f.write(json.dumps(line) + "\n")
