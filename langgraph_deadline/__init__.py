"""langgraph-deadline: one deadline per LangGraph run, carried in state and context to every step.

Every step gets `min(its cap, what is left - reserve)`, refuses to start when that is below what it
needs, is really cancelled at its budget, and ends in a named terminal the caller can act on.
"""

from importlib import metadata as _metadata

from ._agents.model import BudgetedModel, budgeted_model
from ._core.context import check, client_timeout, current_deadline, deadline_scope, remaining
from ._core.deadline import Deadline, earliest
from ._core.errors import DeadlineExceeded
from ._core.observe import set_default_factory as _set_default_factory
from ._core.records import Outcome, StepRecord, Terminal
from ._core.timeouts import timeout_message
from ._graph.forms import DeadlineDataclass, DeadlineModel
from ._graph.node import budgeted
from ._graph.run import terminal_of
from ._graph.settings import Closing
from ._graph.state import DeadlineState, deadline_input
from ._graph.wrap import with_deadlines
from ._instrument.defaults import default_observers as _default_observers
from ._retry.retry import retry
from ._tools.cache import InMemoryStaleCache, StaleCache, StoreStaleCache
from ._tools.hedge import Hedge
from ._tools.make import deadline_tool, deadline_tools
from ._tools.options import Retries

__all__ = [
    "BudgetedModel",
    "Closing",
    "Deadline",
    "DeadlineDataclass",
    "DeadlineExceeded",
    "DeadlineModel",
    "DeadlineState",
    "Hedge",
    "InMemoryStaleCache",
    "Outcome",
    "Retries",
    "StaleCache",
    "StepRecord",
    "StoreStaleCache",
    "Terminal",
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
    "terminal_of",
    "timeout_message",
    "with_deadlines",
]

__version__ = _metadata.version("langgraph-deadline")

# The core emits to observers; which ones a process gets by default is the instrument layer's call.
_set_default_factory(_default_observers)
