"""MCP tools under the run's deadline, cancelled on the MCP server too when a call is cut.

```python
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph_deadline.mcp import mcp_tools

client = MultiServerMCPClient({"docs": {"transport": "streamable_http", "url": url}})
async with mcp_tools(client, default_cap=5.0, caps={"search": 3.0}) as tools:
    agent = create_agent(model, tools, middleware=[DeadlineMiddleware(timeout=20.0)])
    await agent.ainvoke({"messages": [("user", "...")]})
```

Needs `langchain-mcp-adapters` and `mcp` (`pip install 'langgraph-deadline[mcp]'`). What each
transport does without it is in `docs/howto/tools.md`.
"""

from ._tools.mcp import mcp_tools

__all__ = ["mcp_tools"]
