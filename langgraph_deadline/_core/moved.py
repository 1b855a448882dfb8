"""Names that moved or were renamed: the old import path, or the old keyword, keeps working for
one release, with a `DeprecationWarning` that names the new one.

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

__all__ = ["moved", "renamed", "renamed_property"]


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


def renamed(
    where: str, old: str, new: str, old_value: Any, new_value: Any, *, why: str = ""
) -> Any:
    """The value of keyword `new` of `where`, given as `new` or as its old name `old` (with a
    DeprecationWarning on the caller's caller's line, saying `why` when given); `None` means not
    given.

    Raises:
        TypeError: both were given.
    """
    if old_value is None:
        return new_value
    if new_value is not None:
        raise TypeError(f"{where}: give {new}= only ({old}= is its old name)")
    warnings.warn(
        f"{where}({old}=...) is now {where}({new}=...) ({why}{'; ' if why else ''}the old name "
        "goes in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    return old_value


def renamed_property(owner: str, old: str, new: str) -> Any:
    """A read-only property for the old name `old` of `owner`'s property `new`: its value, with a
    DeprecationWarning naming `new` on the reader's line."""

    def read(self: Any) -> Any:
        warnings.warn(
            f"{owner}.{old} is now {owner}.{new} (the old name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(self, new)

    read.__doc__ = f"The old name of `{new}` (a DeprecationWarning; it goes in the next release)."
    return property(read)
