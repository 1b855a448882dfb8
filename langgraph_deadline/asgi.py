"""Incoming HTTP: each request served under the deadline its caller sent, capped by the server.

```python
from starlette.applications import Starlette
from langgraph_deadline.asgi import DeadlineASGIMiddleware

app = Starlette(routes=[...])
app.add_middleware(DeadlineASGIMiddleware, max_timeout=30.0, default_timeout=10.0)
```

Any ASGI app works (Starlette, FastAPI, a bare ASGI callable): the middleware needs only anyio.
"""

from ._wire.asgi import DeadlineASGIMiddleware

__all__ = ["DeadlineASGIMiddleware"]
