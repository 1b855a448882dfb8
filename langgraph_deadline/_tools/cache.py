"""Stale-cache backends for read-only tools: the last good answer, kept per tool, arguments and
namespace, served (marked stale, with its age) when the live call times out."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

from .._core.validate import check_cap

__all__ = ["CachedResult", "InMemoryStaleCache", "StaleCache", "StoreStaleCache", "cache_key"]


@dataclasses.dataclass(frozen=True, slots=True)
class CachedResult:
    """A tool's last good answer and when it was stored (epoch seconds)."""

    content: Any
    stored_at: float

    def age(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.stored_at)


@runtime_checkable
class StaleCache(Protocol):
    """Where read-only tools keep their last good answers. Keys come from `cache_key`."""

    async def aget(self, namespace: str, key: str) -> CachedResult | None: ...

    async def aput(self, namespace: str, key: str, content: Any) -> None: ...

    def get(self, namespace: str, key: str) -> CachedResult | None: ...

    def put(self, namespace: str, key: str, content: Any) -> None: ...


def cache_key(tool: str, args: Any) -> str:
    """`tool` plus a hash of its arguments in canonical JSON (sorted keys): same call, same key.

    Raises:
        TypeError: an argument cannot be represented as JSON (name it, so it can be fixed).
    """

    def refuse(value: object) -> Any:
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return dump(mode="json")
        raise TypeError(
            f"cannot build a stale-cache key for tool {tool!r}: an argument of type "
            f"{type(value).__name__} is not JSON-serializable ({value!r:.60})"
        )

    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), default=refuse)
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()[:40]}"


class InMemoryStaleCache:
    """A bounded in-process cache: at most `max_entries` answers (least recently used go first),
    each kept for `ttl` seconds (None: until evicted). Lost when the process ends."""

    def __init__(self, *, max_entries: int = 1024, ttl: float | None = 3600.0) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self.ttl = check_cap(ttl, "ttl")
        self._data: OrderedDict[tuple[str, str], CachedResult] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, namespace: str, key: str) -> CachedResult | None:
        with self._lock:
            hit = self._data.get((namespace, key))
            if hit is None:
                return None
            if self.ttl is not None and hit.age() > self.ttl:
                del self._data[(namespace, key)]
                return None
            self._data.move_to_end((namespace, key))
            return hit

    def put(self, namespace: str, key: str, content: Any) -> None:
        with self._lock:
            self._data[(namespace, key)] = CachedResult(content, time.time())
            self._data.move_to_end((namespace, key))
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    async def aget(self, namespace: str, key: str) -> CachedResult | None:
        return self.get(namespace, key)

    async def aput(self, namespace: str, key: str, content: Any) -> None:
        self.put(namespace, key, content)

    def __len__(self) -> int:
        return len(self._data)


class StoreStaleCache:
    """A cache over LangGraph's `BaseStore` (`InMemoryStore`, `SqliteStore`, a Postgres store):
    survives restarts when the store does. Items live under `prefix + (namespace,)`."""

    def __init__(
        self,
        store: Any,
        *,
        ttl: float | None = None,
        prefix: tuple[str, ...] = ("langgraph_deadline", "stale"),
    ) -> None:
        from langgraph.store.base import BaseStore

        if not isinstance(store, BaseStore):
            raise TypeError(f"store must be a langgraph BaseStore, got {type(store).__name__}")
        self.store = store
        self.ttl = check_cap(ttl, "ttl")
        self.prefix = tuple(prefix)

    def _ns(self, namespace: str) -> tuple[str, ...]:
        return (*self.prefix, namespace)

    def _hit(self, item: Any) -> CachedResult | None:
        if item is None:
            return None
        hit = CachedResult(item.value["content"], float(item.value["stored_at"]))
        if self.ttl is not None and hit.age() > self.ttl:
            return None
        return hit

    def get(self, namespace: str, key: str) -> CachedResult | None:
        return self._hit(self.store.get(self._ns(namespace), key))

    def put(self, namespace: str, key: str, content: Any) -> None:
        value = {"content": content, "stored_at": time.time()}
        self.store.put(self._ns(namespace), key, value, index=False)

    async def aget(self, namespace: str, key: str) -> CachedResult | None:
        return self._hit(await self.store.aget(self._ns(namespace), key))

    async def aput(self, namespace: str, key: str, content: Any) -> None:
        value = {"content": content, "stored_at": time.time()}
        await self.store.aput(self._ns(namespace), key, value, index=False)
