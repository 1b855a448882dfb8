"""A pytest plugin that runs LangGraph's own tests with every `@entrypoint` they make wrapped by
`with_deadlines` (a generous timeout: with time to spare, the wrapped entrypoint must behave as
the bare one). Not collected here; loaded into LangGraph's suite from its sdist:

    cd langgraph-1.2.24 && NO_DOCKER=true PYTHONPATH=<this folder>:<repo> \\
        python -m pytest -p lgd_entrypoints_plugin tests/test_pregel.py tests/test_pregel_async.py

Its conftest imports `redis` and `pytest_mock`: where they are not installed, empty stand-ins
(a `redis` package with a `Redis` class, a `pytest_mock` one with `MockerFixture`) on the
`PYTHONPATH` let it load; the cases that need them then error. docs/integrations.md says which
of its tests were run and what they found.
"""

from __future__ import annotations

from typing import Any

import langgraph.func

from langgraph_deadline import with_deadlines

_bare = langgraph.func.entrypoint.__call__


def _wrapped(self: langgraph.func.entrypoint[Any], func: Any) -> Any:
    return with_deadlines(_bare(self, func), timeout=120.0)


langgraph.func.entrypoint.__call__ = _wrapped  # type: ignore[method-assign]
