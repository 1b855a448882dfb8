"""langgraph-deadline: one deadline per LangGraph run, carried in state and context to every step.

Every step gets `min(its cap, what is left - reserve)`, refuses to start when that is below what it
needs, is really cancelled at its budget, and ends in a named terminal the caller can act on.
"""

from importlib import metadata as _metadata
from typing import Any as _Any

from ._agents.model import BudgetedModel, budgeted_model
from ._core.clock import Clock, SystemClock
from ._core.context import check, client_timeout, current_deadline, deadline_scope, remaining
from ._core.deadline import Deadline, earliest
from ._core.errors import DeadlineExceeded, ScopeFrame
from ._core.moved import moved as _moved
from ._core.observe import set_default_factory as _set_default_factory
from ._core.records import Outcome, StepRecord, StepStatus, Terminal
from ._core.timeouts import ToolTimeout, timeout_message
from ._graph.forms import DeadlineDataclass, DeadlineModel
from ._graph.functional import DeadlineEntrypoint
from ._graph.graph import DeadlineGraph
from ._graph.node import budgeted
from ._graph.state import DeadlineState, deadline_input
from ._graph.terminal import terminal_of
from ._graph.wrap import with_deadlines
from ._instrument.defaults import default_observers as _default_observers
from ._learn.book import LatencyBook
from ._learn.policy import Learned, learned
from ._learn.sketch import Estimate, LatencySketch
from ._retry.retry import retry
from ._retry.tenacity import stop_at_deadline, wait_within_deadline
from ._tools.cache import InMemoryStaleCache, StaleCache, StoreStaleCache
from ._tools.hedge import Hedge
from ._tools.make import deadline_tool, deadline_tools
from ._tools.tool import DeadlineTool

__all__ = [
    "BudgetedModel",
    "Clock",
    "Deadline",
    "DeadlineDataclass",
    "DeadlineEntrypoint",
    "DeadlineExceeded",
    "DeadlineGraph",
    "DeadlineModel",
    "DeadlineState",
    "DeadlineTool",
    "Estimate",
    "Hedge",
    "InMemoryStaleCache",
    "LatencyBook",
    "LatencySketch",
    "Learned",
    "Outcome",
    "ScopeFrame",
    "StaleCache",
    "StepRecord",
    "StepStatus",
    "StoreStaleCache",
    "SystemClock",
    "Terminal",
    "ToolTimeout",
    "budgeted",
    "budgeted_model",
    "check",
    "client_timeout",
    "current_deadline",
    "deadline_input",
    "deadline_scope",
    "deadline_tool",
    "deadline_tools",
    "earliest",
    "learned",
    "remaining",
    "retry",
    "stop_at_deadline",
    "terminal_of",
    "timeout_message",
    "wait_within_deadline",
    "with_deadlines",
]

__version__ = _metadata.version("langgraph-deadline")

# The core emits to observers; which ones a process gets by default is the instrument layer's call.
_set_default_factory(_default_observers)

# Names that moved to the public module that owns them; the old path warns for one release.
_MOVED = {"ManualClock": "langgraph_deadline.testing"}


def __getattr__(name: str) -> _Any:
    return _moved(__name__, name, _MOVED)
