"""Names that moved to another public module: the old import path keeps working for one release,
with a `DeprecationWarning` that names the new one.

A public module that gave a name away keeps a table of them and answers for them in its module
`__getattr__`, which Python calls only for a name the module does not have:

```python
_MOVED = {"ManualClock": "langgraph_deadline.testing"}

def __getattr__(name: str) -> Any:
    return moved(__name__, name, _MOVED)
```
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["moved"]


def moved(module: str, name: str, moves: Mapping[str, str]) -> Any:
    """`name` of `module`, now in `moves[name]`: imported from there, with a DeprecationWarning
    naming the new path (on the caller's line).

    Raises:
        AttributeError: `module` has no `name`, and never had (it is not in `moves`).
    """
    home = moves.get(name)
    if home is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} has moved: from {home} import {name} (the old path goes in the next "
        "release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(home), name)
