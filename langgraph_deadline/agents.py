"""LangChain agents under one deadline: `DeadlineMiddleware` for `langchain.agents.create_agent`.

```python
from langchain.agents import create_agent
from langgraph_deadline.agents import DeadlineMiddleware

agent = create_agent(
    model,
    tools,
    middleware=[DeadlineMiddleware(timeout=20.0, model_min_viable=2.0, tool_caps={"search": 5.0})],
)
out = await agent.ainvoke({"messages": [("user", "where is my order?")]})
out["deadline_outcome"].terminal   # Terminal.COMPLETED or Terminal.DEADLINE_EXCEEDED
```

Needs the `langchain` package (`create_agent` lives there); `budgeted_model` does not.
"""

from ._agents.middleware import DeadlineMiddleware
from ._agents.model import BudgetedModel, budgeted_model
from ._agents.run import DeadlineAgentState

__all__ = ["BudgetedModel", "DeadlineAgentState", "DeadlineMiddleware", "budgeted_model"]
