"""What can still run after each node on the way to END, read once from a `StateGraph`'s edges;
for an `@entrypoint`'s tasks, from what followed each of them in its past runs (`PastFollowers`).

From the builder's description, as LangGraph's own `validate` reads it: plain edges, joins
(`add_edge([a, b], c)`: each of `a` and `b` leads to `c`), conditional edges (to the ends they
declare: a `path_map` or a `Literal` return type; to every node when they declare none) and a
node's `Command` destinations. Error handlers are left out: they run only when a node fails.

For each node, its paths: the node sequences that can follow it, each ending at END or where
the next step would be a node already on the path (a loop counts once: after `tools` in an
agent loop, `model`). A path that can only go round back to the node it starts from (after
`model`, `tools`, which leads only back to `model`) is not one of that node's: it decides again
each time round, and may end the loop now (`_round`; an entrypoint's tasks, whose way out is
not known, keep theirs). Parallel branches are separate paths, so they
count as the longest of them; a path whose nodes are all on a longer one is dropped (it never
costs more). A graph with more than `_MOST_PATHS` paths from a node (none of the common
shapes) gets one path instead: every node reachable from it, each once.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Collection, Iterable
from typing import Any, Final

from langgraph.constants import END, START
from langgraph.graph import StateGraph

from .._core.follow import Following
from .._core.rules import StepRule, Timings

__all__ = ["PastFollowers", "found_book", "keeping_back", "past_followers", "paths_after"]

Path = tuple[str, ...]
_MOST_PATHS: Final = 256


def paths_after(builder: StateGraph[Any, Any, Any, Any]) -> dict[str, tuple[Path, ...]]:
    """Each node's paths to END (see the module); `()` for a node nothing follows."""
    nodes = {name for name, spec in builder.nodes.items() if not spec.is_error_handler}
    after: dict[str, set[str]] = {name: set() for name in nodes}
    after[START] = set()

    def link(source: str, target: str) -> None:
        if source in after and (target in nodes or target == END):
            after[source].add(target)

    for source, target in builder.edges:
        link(source, target)
    for sources, target in builder.waiting_edges:
        for source in sources:
            link(source, target)
    for source, branches in builder.branches.items():
        for branch in branches.values():
            targets: Collection[str] = (
                [*nodes, END] if branch.ends is None else list(branch.ends.values())
            )
            for target in targets:
                if target != source or branch.ends is not None:
                    link(source, target)
    for name, spec in builder.nodes.items():
        for target in spec.ends or ():
            link(name, target)
    return {name: _paths(name, after, rounds=False) for name in sorted(nodes)}


_TOUCHING: Final = 0.001  # a step that starts within 1 ms before another ends still follows it
_MOST_STEPS: Final = 64  # the tasks of one run read (in the order they started)


@dataclasses.dataclass(slots=True, eq=False)
class PastFollowers:
    """What followed each task of an entrypoint in its past runs, as its paths (see the module):
    a task followed another in a run when it started after that one ended with none between
    them (tasks called in parallel follow none of each other). Runs add what they saw (`learn`);
    a task's paths are those of every run so far, joined (`paths`), the costliest one kept back
    at its learned high quantile (`Following`). Kept in memory, one per book and entrypoint
    name (`past_followers`)."""

    after: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    _paths: dict[str, tuple[Path, ...]] = dataclasses.field(default_factory=dict)
    _rules: dict[tuple[str, tuple[Path, ...]], Any] = dataclasses.field(default_factory=dict)

    def learn(self, steps: Iterable[tuple[str, float, float]]) -> None:
        """One run's tasks, each `(name, started, ended)` (seconds on one clock)."""
        runs = sorted(steps, key=lambda s: s[1])[:_MOST_STEPS]
        new = False
        for name, _, ended in runs:
            later = [s for s in runs if s[1] >= ended - _TOUCHING]
            for other, started, _ in later:
                if any(s[1] >= ended - _TOUCHING and s[2] <= started + _TOUCHING for s in later):
                    continue  # another task ran between them: it follows that one
                if other not in self.after.setdefault(name, set()):
                    self.after[name].add(other)
                    new = True
            self.after.setdefault(name, set())
        if new:
            self._paths.clear()
            self._rules.clear()

    def paths(self, name: str) -> tuple[Path, ...]:
        """The paths that followed task `name` in past runs (`()`: none, or never seen)."""
        found = self._paths.get(name)
        if found is None:
            found = self._paths[name] = _paths(name, self.after)
        return found

    def cap(
        self,
        name: str,
        cap: float | StepRule | None,
        book: Timings,
        floors: dict[str, float],
    ) -> float | StepRule | None:
        """Task `name`'s cap, keeping back what followed it in past runs (`keeping_back`): one
        rule per task and paths, so that its pricing is kept between calls."""
        paths = self.paths(name)
        if not paths:
            return cap
        key = (name, paths)
        rule = self._rules.get(key)
        if rule is None:
            rule = self._rules[key] = keeping_back(cap, paths, book, floors)
        return rule


_PAST: weakref.WeakKeyDictionary[Any, dict[str, PastFollowers]] = weakref.WeakKeyDictionary()


def past_followers(book: Timings, entrypoint: str) -> PastFollowers:
    """What followed the tasks of the entrypoint named `entrypoint`, one per book: an
    entrypoint wrapped again (for each request, at each worker's start) goes on from what its
    earlier runs with the same book taught (a fresh one for a book that cannot be weakly held)."""
    try:
        kept = _PAST.setdefault(book, {})
    except TypeError:
        return PastFollowers()
    return kept.setdefault(entrypoint, PastFollowers())


def _paths(start: str, after: dict[str, set[str]], *, rounds: bool = True) -> tuple[Path, ...]:
    """`start`'s paths (see the module); `rounds=False`: without those that can only go round
    back to `start` (`_round`)."""
    found: list[Path] = []
    stack: list[tuple[str, Path]] = [(start, ())]
    while stack:
        node, path = stack.pop()
        seen = {start, *path}
        nexts = sorted(n for n in after.get(node, ()) if n != END and n not in seen)
        if not nexts:
            if path and (rounds or not _round(start, after.get(node, ()))):
                found.append(path)
            if len(found) > _MOST_PATHS:
                return (_reachable(start, after),)
            continue
        stack.extend((n, (*path, n)) for n in reversed(nexts))
    return _longest_only(found)


def _round(start: str, nexts: Collection[str]) -> bool:
    """A path whose last node leads only back round to `start` (never to END): a loop that
    `start` runs again after, deciding again each time round whether to take it. `start` keeps
    nothing back for it: an agent's model call may be its final answer, with no tools step
    after it, and cut for one it would end the run; when it does call tools, it is short, and
    the tools node keeps back the next model call's time in turn."""
    return start in nexts and END not in nexts


def _reachable(start: str, after: dict[str, set[str]]) -> Path:
    seen: list[str] = []
    todo = [start]
    while todo:
        for n in sorted(after.get(todo.pop(), ())):
            if n != END and n != start and n not in seen:
                seen.append(n)
                todo.append(n)
    return tuple(seen)


def _longest_only(paths: list[Path]) -> tuple[Path, ...]:
    """The paths no other path covers (same nodes or more), longest first."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (-len(p), p)):
        if not any(set(path) <= set(other) for other in kept):
            kept.append(path)
    return tuple(kept)


def found_book(*tables: dict[str, Any], builder: Any = None) -> Timings | None:
    """The latency book of the first learned setting among `tables`' values, or of the learned
    cap or min_viable of a tool in one of `builder`'s tool nodes (a `ToolNode`, as
    `create_agent`'s), if any."""
    for table in tables:
        for value in table.values():
            if isinstance(value, StepRule) and value.book is not None:
                return value.book
    for spec in getattr(builder, "nodes", {}).values():
        for tool in (getattr(spec.runnable, "tools_by_name", None) or {}).values():
            options = getattr(tool, "options", None)
            for value in (getattr(options, "cap", None), getattr(options, "min_viable", None)):
                if isinstance(value, StepRule) and value.book is not None:
                    return value.book
    return None


def keeping_back(
    cap: float | StepRule | None,
    paths: tuple[Path, ...],
    book: Timings,
    floors: dict[str, float],
    *,
    optional: bool = False,
) -> float | StepRule | None:
    """A node's cap, keeping back the time of what can follow it (`cap` itself when nothing
    can, or when it is a `learned(..., then=[...])`: the steps it names are the user's word);
    `optional`: the node is dropped when cut at its own budget (`Following`)."""
    if not paths or getattr(cap, "then", None):
        return cap
    return Following(cap, paths, book, floors, optional=optional)
