"""Optional dependencies: an import that fails for a missing package names the extra that
brings it (`pip install 'langgraph-deadline[otel]'`) instead of a bare `ModuleNotFoundError`.

One helper for every optional import: `needs_extra` around the imports (a module's, or a
function's lazy ones), `require_extra` to check a list of packages up front (a command that
would otherwise fail half-way), and `install_hint` for code that reports instead of raising.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

__all__ = ["install_hint", "missing_extra", "needs_extra", "require_extra"]

DISTRIBUTION = "langgraph-deadline"


def install_hint(extra: str) -> str:
    """The command that installs `extra`: `pip install 'langgraph-deadline[extra]'`."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_extra(extra: str, what: str, error: ModuleNotFoundError) -> ModuleNotFoundError:
    """The error to raise when `what` cannot import a package of `extra` (`error`)."""
    package = (error.name or "a package").split(".")[0]
    return ModuleNotFoundError(
        f"{what} needs {package}, which is not installed: {install_hint(extra)}",
        name=error.name,
    )


@contextlib.contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Imports in the block that fail for a missing package raise `ModuleNotFoundError` naming
    `what` needs it and how to install `extra`. A missing module of this library itself is a
    bug, not a missing extra, and is raised as it is.

    Raises:
        ModuleNotFoundError: a package of `extra` is not installed.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "langgraph_deadline":
            raise
        raise missing_extra(extra, what, exc) from exc


def require_extra(extra: str, what: str, *packages: str) -> None:
    """Import each of `packages` now, so that `what` fails before it starts, not half-way.

    Raises:
        ModuleNotFoundError: one of them is not installed (naming `extra`).
    """
    with needs_extra(extra, what):
        for package in packages:
            importlib.import_module(package)
