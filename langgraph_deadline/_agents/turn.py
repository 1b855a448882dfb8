"""One user turn, one deadline, whichever agent holds it: how an agent running inside a parent
graph (a `langgraph-swarm` swarm, a `langgraph-supervisor` worker, any subgraph) joins the
deadline already in force instead of starting its own, and hands it on at a handoff.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar, cast

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.types import Command, Overwrite

from .._core.context import current_scopes
from .._core.deadline import Deadline
from .._graph.seams import running_config
from .._graph.state import deadline_from_state

__all__ = ["deadline_around", "handed_on", "in_parent_graph", "turn_in_progress"]

T = TypeVar("T")

_NS_SEP: Final = "|"
"""How LangGraph joins the levels of a `checkpoint_ns` (`graph|subgraph`): a public format."""


def in_parent_graph() -> bool:
    """Whether this node runs inside a parent graph (the agent is a swarm member, a worker,
    a subgraph), read from LangGraph's checkpoint namespace."""
    config = running_config() or {}
    namespace = config.get("configurable", {}).get("checkpoint_ns") or ""
    return _NS_SEP in str(namespace)


def deadline_around() -> Deadline | None:
    """The deadline in context around the node this runs in, for the agent's own deadline.

    Under `with_deadlines` the innermost scope is the node's own step (the agent's first node,
    `before_agent`): its budget is that node's cap, less what it keeps back for the nodes after
    it (the agent's model and tool calls), and is not the agent's to run against. The scopes
    outside it are: a parent node's budget, a `deadline_scope` around the run."""
    frames = current_scopes()
    if not frames:
        return None
    node = ((running_config() or {}).get("metadata") or {}).get("langgraph_node")
    if node is not None and frames[-1].name == node:
        frames = frames[:-1]
    return frames[-1].effective if frames else None


def turn_in_progress(state: Mapping[str, Any], own_stamp: float | None) -> Deadline | None:
    """The deadline of the user turn this agent was handed in the middle of, if any.

    A turn is in progress when the agent runs inside a parent graph, its input does not end with
    the user's message (another agent handed off to it, or a supervisor delegated) and the state
    carries a deadline this agent did not stamp itself.
    """
    stamped = state.get("deadline")
    if stamped is None or stamped == own_stamp or not in_parent_graph():
        return None
    messages: Sequence[BaseMessage] = state.get("messages") or ()
    if not messages or isinstance(messages[-1], HumanMessage):
        return None
    return deadline_from_state(state)


def handed_on(value: T, state: Mapping[str, Any]) -> T:
    """A handoff (`Command(graph=Command.PARENT)`) carrying the turn's deadline and the agent's
    records (before the handoff's own, already in the update) to the parent graph, so the next
    agent joins that deadline instead of starting its own. Parents without the deadline fields
    ignore them. Any other value is returned as it is."""
    if not (isinstance(value, Command) and value.graph == Command.PARENT):
        return value
    if not isinstance(value.update, dict | None) or state.get("deadline") is None:
        return value
    update = dict(value.update or {})
    update["deadline"] = Overwrite(state["deadline"])  # a previous turn's may be earlier
    update["deadline_outcome"] = None  # the turn goes on: a previous turn's outcome is cleared
    update["deadline_trace"] = [
        *(state.get("deadline_trace") or ()),
        *(update.get("deadline_trace") or ()),
    ]
    handoff: Any = Command(graph=value.graph, update=update, resume=value.resume, goto=value.goto)
    return cast(T, handoff)
