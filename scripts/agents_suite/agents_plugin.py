"""A pytest plugin that runs LangChain's own agent tests with `DeadlineMiddleware` given to
every `create_agent` (a deadline nobody reaches, so nothing should change).

Loaded by `run.py` with `-p agents_plugin`; `LGD_AGENTS_MODE` says where the middleware goes:
`plain` (nowhere: the plugin only writes each test's outcome), `first` (listed first, as the
docs say), `last` (appended after the test's own middleware), `wrapped` (listed first, and the
agent wrapped by `with_deadlines`) or `graph` (no middleware: the agent wrapped by
`with_deadlines` alone). `LGD_SUITE_OUT` names the JSON-lines file the outcomes go
to (written by the LangGraph suite's plugin, loaded too).
"""

from __future__ import annotations

import os
import resource
from typing import Any

import pytest

TIMEOUT = 600.0
MODES = ("plain", "first", "last", "wrapped", "graph")
MEMORY = 6 * 2**30
"""Each test process's address space, at most: a test that loops (a graph that never ends)
fails with a MemoryError instead of taking the machine's memory."""


def _insert_middleware(mode: str) -> None:
    import langchain.agents
    import langchain.agents.factory

    from langgraph_deadline import with_deadlines
    from langgraph_deadline.agents import DeadlineMiddleware

    create_plain = langchain.agents.factory.create_agent

    def create_agent(*args: Any, middleware: Any = (), **kwargs: Any) -> Any:
        ours = [] if mode == "graph" else [DeadlineMiddleware(timeout=TIMEOUT)]
        listed = [*middleware, *ours] if mode == "last" else [*ours, *middleware]
        agent = create_plain(*args, middleware=listed, **kwargs)
        return with_deadlines(agent, timeout=TIMEOUT) if mode in ("wrapped", "graph") else agent

    langchain.agents.factory.create_agent = create_agent  # type: ignore[assignment]
    langchain.agents.create_agent = create_agent  # type: ignore[assignment]


def pytest_configure(config: pytest.Config) -> None:
    mode = os.environ.get("LGD_AGENTS_MODE", "plain")
    if mode not in MODES:
        raise pytest.UsageError(f"LGD_AGENTS_MODE must be one of {MODES}, got {mode!r}")
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    if mode != "plain":
        _insert_middleware(mode)
