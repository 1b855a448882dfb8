"""Routers of a run that already ended do not run: a conditional edge of a step the deadline cut
would otherwise route on state that lacks the step's output (the tutorial router's
`state["messages"][-1].tool_calls` on the user's message)."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig

from .chunks import graph_run

__all__ = ["guard_branches"]


def guard_branches(branches: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The builder's conditional edges, each router behind `_Guard`.

    LangGraph 1.2 keeps a node's conditional edges as `BranchSpec` named tuples whose `path`
    is a Runnable called with `(state, config)`; `tests/graph/test_seams.py` checks that shape.
    """
    return {
        source: {name: spec._replace(path=_Guard(spec.path)) for name, spec in per_node.items()}
        for source, per_node in branches.items()
    }


class _Guard(Runnable[Any, Any]):
    """A router that goes nowhere once the run has its terminal; otherwise the user's router."""

    def __init__(self, path: Runnable[Any, Any]) -> None:
        self.path = path
        self.name = path.get_name()

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        run = graph_run(config)
        if run is not None and run.outcome is not None:
            return []
        return self.path.invoke(input, config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        run = graph_run(config)
        if run is not None and run.outcome is not None:
            return []
        return await self.path.ainvoke(input, config, **kwargs)
