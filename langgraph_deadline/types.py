"""The types the package's functions return or take, for annotations: you never build them
(but for `CachedResult`, which your own `StaleCache` returns from `get` and `aget`).

```python
from langgraph_deadline import with_deadlines
from langgraph_deadline.types import DeadlineGraph, StepStatus

graph: DeadlineGraph = with_deadlines(builder, timeout=30.0)
out = await graph.ainvoke(inputs)
late = [r for r in out["deadline_trace"] if r.status is StepStatus.TIMED_OUT]
```
"""

from ._core.errors import ScopeFrame
from ._core.records import StepStatus
from ._core.timeouts import ToolTimeout
from ._graph.functional import DeadlineEntrypoint
from ._graph.graph import DeadlineGraph
from ._graph.wrap import CompileArgs
from ._tools.cache import CachedResult
from ._tools.make import ToolArgs
from ._tools.tool import DeadlineTool

__all__ = [
    "CachedResult",
    "CompileArgs",
    "DeadlineEntrypoint",
    "DeadlineGraph",
    "DeadlineTool",
    "ScopeFrame",
    "StepStatus",
    "ToolArgs",
    "ToolTimeout",
]
