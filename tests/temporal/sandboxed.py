"""A workflow module as Temporal users write one: run in the default sandbox, which imports it
again in isolation (so it imports only what a workflow may)."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.langgraph import graph


@workflow.defn
class SandboxedHangWorkflow:
    @workflow.run
    async def run(self, state: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await graph("hang").compile().ainvoke(state)
        return result
