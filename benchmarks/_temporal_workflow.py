"""The benchmark's workflow (Temporal refuses local workflow classes); imported lazily."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.langgraph import graph


@workflow.defn(name="BenchHang")
class BenchHang:
    @workflow.run
    async def run(self, state: dict[str, Any]) -> Any:
        try:
            return await graph("hang").compile().ainvoke(state)
        except Exception as exc:  # the outcome is the time it returns, not its value
            return type(exc).__name__
