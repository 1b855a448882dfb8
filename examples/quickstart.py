"""The README's Quick look as one program: `python -m examples.quickstart` (or `python
examples/quickstart.py`). No network but loopback: a local server stands in for your services.

1. A graph whose search node hangs: the run ends at the search's 2 s cap with
   `deadline_exceeded`, and the caller learns where.
2. A read-only tool with a stale cache: a live answer is cached (per thread), and when the
   service hangs the model gets that answer marked stale, with its age, instead of an error.
"""

import asyncio

import httpx
from langgraph.graph import START, StateGraph

from langgraph_deadline import (
    DeadlineState,
    InMemoryStaleCache,
    Terminal,
    client_timeout,
    deadline_tool,
    with_deadlines,
)
from langgraph_deadline.testing import SlowServer


class State(DeadlineState):  # adds deadline, deadline_outcome, deadline_trace
    question: str
    answer: str


async def search(state: State) -> dict:
    await asyncio.sleep(3)  # a search service that hangs
    return {"answer": "found it"}


async def llm(state: State) -> dict:
    return {"answer": state["answer"].upper()}


builder = StateGraph(State)
builder.add_sequence([search, llm])
builder.add_edge(START, "search")
graph = with_deadlines(builder, timeout=5.0, caps={"search": 2.0}, min_viable={"llm": 1.0})

stock = SlowServer(default_delay=0.0)  # a local stock service: GET /slow answers after
# default_delay seconds
http = httpx.AsyncClient()  # one client for the process, shared by every call


@deadline_tool(cap=0.5, read_only=True, cache=InMemoryStaleCache())
async def stock_level(sku: str) -> str:
    """Current stock level for a SKU."""
    params = {"sku": sku}
    r = await http.get(stock.url("/slow"), params=params, timeout=client_timeout(0.5))  # never 0
    return r.text


async def main() -> None:
    out = await graph.ainvoke({"question": "why was my order late?"})
    if out["deadline_outcome"].terminal is Terminal.DEADLINE_EXCEEDED:
        print("ran out of time in", out["deadline_outcome"].step)  # -> search

    # The cache keeps each user's answers apart: by the config's thread_id (or user_id).
    config = {"configurable": {"thread_id": "order-42"}}
    call = {"type": "tool_call", "id": "call-1", "name": "stock_level", "args": {"sku": "A1"}}
    with stock:
        print((await stock_level.ainvoke(call, config)).content)  # a live answer, cached
        stock.default_delay = 2.0  # the service now hangs
        print((await stock_level.ainvoke(call, config)).content)  # the cached answer, stale
    await http.aclose()


if __name__ == "__main__":
    asyncio.run(main())
