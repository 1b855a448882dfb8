"""The LangGraph seams this library plugs into, in one place (checked against langgraph 1.2).

Everything here is public LangGraph API; `tests/graph/test_seams.py` fails loudly when one of
them changes shape.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Final

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import get_runtime

__all__ = [
    "DRAIN_REASON",
    "PASSTHROUGH",
    "check_thread",
    "defaults_to_compile",
    "drain",
    "node_attempt",
    "runs_on_a_thread",
]

PASSTHROUGH: Final[tuple[type[BaseException], ...]] = (GraphBubbleUp,)
"""LangGraph's control-flow exceptions (interrupts, drains): a step lets them through untouched."""

DRAIN_REASON: Final = "deadline_exceeded"
"""The reason given to `RunControl.request_drain` when a step ran out of budget."""


def _runtime() -> Any:
    try:
        return get_runtime()
    except Exception:  # outside a graph run (a direct call in a test)
        return None


_RUNTIME_KEY: Final = "__pregel_runtime"
"""Where LangGraph 1.x puts a task's `Runtime` in its config (what `get_runtime()` reads)."""


def node_attempt(config: Mapping[str, Any] | None = None) -> int:
    """The attempt number of the node running here (LangGraph's retries count up from 1).

    Given the node's `config`, it is read from there (the hot path: no context lookup)."""
    conf = config.get("configurable", {}) if config is not None else None
    runtime = conf.get(_RUNTIME_KEY) if conf is not None else _runtime()
    info = getattr(runtime, "execution_info", None)
    return info.node_attempt if info is not None else 1


def drain() -> None:
    """Ask LangGraph to stop after this superstep: no further node body runs."""
    control = getattr(_runtime(), "control", None)
    if control is not None:
        control.request_drain(DRAIN_REASON)


def runs_on_a_thread(node: Any) -> bool:
    """True for a function node with only a sync body: under `ainvoke` LangGraph runs it on an
    executor thread, which a budget cannot stop (its step is `abandoned`, not `timed_out`).

    LangGraph 1.2 exposes a function node's bodies as `func` / `afunc`, and gives a sync-only
    node an `afunc` that is `functools.partial(run_in_executor, None, func)`.
    """
    func = getattr(node, "func", None)
    if func is None:
        return False
    afunc = getattr(node, "afunc", None)
    return afunc is None or (isinstance(afunc, functools.partial) and func in afunc.args)


_DEFAULT_ERROR_HANDLER: Final = "__default_error_handler__"
"""The node `StateGraph.compile` adds for `set_node_defaults(error_handler=...)`."""


def defaults_to_compile(builder: Any) -> Any:
    """The node defaults (`set_node_defaults`) for compiling `builder` once more.

    LangGraph 1.2's `compile` applies them to the builder itself: it adds the default error
    handler as a node (and refuses to add it twice) and writes the defaults into the node specs.
    A builder compiled already keeps its handler node; compiling it again must not add another.
    """
    defaults = builder._node_defaults
    if defaults.error_handler is not None and _DEFAULT_ERROR_HANDLER in builder.nodes:
        return dataclasses.replace(defaults, error_handler=None)
    return defaults


def check_thread(checkpointer: Any, config: Mapping[str, Any]) -> None:
    """Refuse a run of a checkpointed graph whose config has no `configurable` keys, as LangGraph
    1.2 does (`Pregel._defaults`): it checks the config it is given, in which the run's tracker
    already rides, so the caller's config is checked here first, with LangGraph's words.

    Raises:
        ValueError: LangGraph's own error for a missing `thread_id`.
    """
    if isinstance(checkpointer, BaseCheckpointSaver) and not config.get("configurable"):
        raise ValueError(
            "Checkpointer requires one or more of the following 'configurable' "
            "keys: thread_id, checkpoint_ns, checkpoint_id"
        )
