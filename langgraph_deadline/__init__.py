"""langgraph-deadline: one deadline per LangGraph run, carried in state and context to every step.

Every step gets `min(its cap, what is left - reserve)`, refuses to start when that is below what it
needs, is really cancelled at its budget, and ends in a named terminal the caller can act on.
"""

from ._cache import InMemoryStaleCache, StaleCache, StoreStaleCache
from ._clock import Clock, ManualClock, SystemClock
from ._context import check, client_timeout, current_deadline, deadline_scope, remaining
from ._deadline import Deadline, earliest
from ._errors import DeadlineExceeded, ScopeFrame
from ._graph import DeadlineGraph, terminal_of, with_deadlines
from ._model import BudgetedModel, budgeted_model
from ._node import budgeted
from ._records import Outcome, StepRecord, StepStatus, Terminal
from ._retry import retry, stop_at_deadline, wait_within_deadline
from ._state import DeadlineState, deadline_input
from ._tool import DeadlineTool, ToolTimeout, deadline_tool, deadline_tools, timeout_message

__all__ = [
    "BudgetedModel",
    "Clock",
    "Deadline",
    "DeadlineExceeded",
    "DeadlineGraph",
    "DeadlineState",
    "DeadlineTool",
    "InMemoryStaleCache",
    "ManualClock",
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
    "remaining",
    "retry",
    "stop_at_deadline",
    "terminal_of",
    "timeout_message",
    "wait_within_deadline",
    "with_deadlines",
]

__version__ = "0.1.0"
