"""LangChain agents under one deadline: `DeadlineMiddleware` for `langchain.agents.create_agent`.

```python
from langchain.agents import create_agent
from langgraph_deadline.agents import DeadlineMiddleware, ModelLimits

agent = create_agent(
    model,
    tools,
    middleware=[
        DeadlineMiddleware(
            timeout=20.0, model_limits=ModelLimits(min_viable=2.0), tool_caps={"search": 5.0}
        )
    ],
)
out = await agent.ainvoke({"messages": [("user", "where is my order?")]})
out["deadline_outcome"].terminal   # Terminal.COMPLETED or Terminal.DEADLINE_EXCEEDED
```

Needs the `langchain` package, from the `agents` extra (`pip install
'langgraph-deadline[agents]'`); without it, importing this module says so.
"""

from ._core.extras import needs_extra

with needs_extra("agents", "langgraph_deadline.agents"):
    from ._agents.middleware import DeadlineMiddleware
    from ._agents.model import ModelLimits
    from ._agents.run import DeadlineAgentState

__all__ = ["DeadlineAgentState", "DeadlineMiddleware", "ModelLimits"]
