"""LangGraph's node cache (`add_node(..., cache_policy=)`, `compile(cache=)`) under deadlines.

A cache hit replays a node's writes in a later run, so two things stay out of it:

- a node the deadline ended early (cut, skipped, abandoned), or whose answer holds a step that
  did not complete (a tool call answered with a timeout, a stale read): it is not cached at all
  (`seams.uncached` marks its writes, and `DeadlineCache` does not store them), so the same
  input runs the node again;
- in a cached real result, this library's own fields (`deadline`, `deadline_outcome`,
  `deadline_trace`): they belong to the run that computed it (its deadline, its records), and
  they would put this library's classes in the cache, which LangGraph's serializer warns
  about and blocks under strict msgpack. `DeadlineCache` drops them on the way in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langgraph.cache.base import BaseCache, FullKey, Namespace

from .seams import NO_WRITES, UNCACHED

__all__ = ["DeadlineCache", "deadline_cache"]

_OURS: Final = frozenset({"deadline", "deadline_outcome", "deadline_trace"})

Writes = Sequence[tuple[str, Any]]


class DeadlineCache(BaseCache[Any]):
    """A node cache that keeps this library's fields out of the writes it stores, and
    otherwise is the `cache` it wraps (reads, clears, TTLs, its serializer)."""

    def __init__(self, cache: BaseCache[Any]) -> None:
        super().__init__(serde=cache.serde)
        self.cache = cache

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return self.cache.get(keys)

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return await self.cache.aget(keys)

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        if kept := _plain(pairs):
            self.cache.set(kept)

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        if kept := _plain(pairs):
            await self.cache.aset(kept)

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        self.cache.clear(namespaces)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await self.cache.aclear(namespaces)

    def __repr__(self) -> str:
        return f"DeadlineCache({self.cache!r})"


def deadline_cache(cache: BaseCache[Any] | None) -> BaseCache[Any] | None:
    """`cache` wrapped as a `DeadlineCache` (once), None as None."""
    if cache is None or isinstance(cache, DeadlineCache):
        return cache
    return DeadlineCache(cache)


def _plain(
    pairs: Mapping[FullKey, tuple[Any, int | None]],
) -> dict[FullKey, tuple[Any, int | None]]:
    """The pairs worth storing: a node marked `uncached` is left out, the rest without our
    fields."""
    return {
        key: (_without_ours(writes), ttl)
        for key, (writes, ttl) in pairs.items()
        if not _marked(writes)
    }


def _marked(writes: Any) -> bool:
    return isinstance(writes, Sequence) and any(
        isinstance(w, tuple) and len(w) == 2 and w[0] == NO_WRITES and w[1] == UNCACHED
        for w in writes
    )


def _without_ours(writes: Any) -> Any:
    """`writes` (a node's `(channel, value)` pairs) without our fields; a copy: LangGraph
    passes the task's own list, which the run still reads."""
    if not isinstance(writes, Sequence) or not any(_ours(w) for w in writes):
        return writes
    kept = [w for w in writes if not _ours(w)] or [(NO_WRITES, None)]
    return deque(kept) if isinstance(writes, deque) else kept  # as LangGraph stores it


def _ours(write: object) -> bool:
    return isinstance(write, tuple) and len(write) == 2 and write[0] in _OURS
