"""Tenacity under the deadline in context: a `stop` and a `wait` for tenacity's own loops.

```python
import tenacity
from langgraph_deadline.tenacity import stop_at_deadline, wait_within_deadline

@tenacity.retry(
    stop=stop_at_deadline(min_attempt=0.2) | tenacity.stop_after_attempt(5),
    wait=wait_within_deadline(tenacity.wait_exponential(max=2)),
)
async def fetch() -> str: ...
```

No retry starts whose pause plus `min_attempt` cannot fit in what is left, and a wait never
sleeps past the deadline. Needs `tenacity` (the `tenacity` extra) only to combine stops.
"""

from ._retry.tenacity import stop_at_deadline, wait_within_deadline

__all__ = ["stop_at_deadline", "wait_within_deadline"]
