"""Outgoing HTTP: the deadline in context travels with every request, and comes back as an error.

```python
import httpx
from langgraph_deadline.http import deadline_hooks

client = httpx.AsyncClient(event_hooks=deadline_hooks())   # or httpx.Client, httpx2.*Client
```

Under a deadline (a `with_deadlines` run, a `deadline_scope`, a request served behind
`DeadlineASGIMiddleware`) each request, and each redirect and retry of it, is sent with the time
left in `X-Request-Timeout-Ms` (and the absolute `X-Request-Deadline`), its connect, read, write
and pool timeouts cut to that time, or not sent at all when none is left. A downstream service
that ran out of that time answers 504 with a short JSON body; the hooks turn it back into
`DeadlineExceeded`, which LangGraph does not retry. The wire format is in
`docs/howto/across-services.md`.
"""

from ._core.headers import WireFormat
from ._wire.hooks import deadline_hooks, from_headers, to_headers

__all__ = ["WireFormat", "deadline_hooks", "from_headers", "to_headers"]
