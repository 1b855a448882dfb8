"""Stale-cache backends for read-only tools: the last good answer, kept per tool, arguments and
namespace, served (marked stale, with its age) when the live call times out."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

from .._core.validate import check_cap, show

__all__ = [
    "CachedResult",
    "InMemoryStaleCache",
    "StaleCache",
    "StoreStaleCache",
    "cache_key",
    "default_namespace",
    "store_label",
]

log = logging.getLogger("langgraph_deadline")


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


def default_namespace(config: Mapping[str, Any] | None) -> str | None:
    """Whose cached answers a run may be served: the namespace when the tool names none.

    From the config's `configurable`, the first that is set:

    1. `langgraph_auth_user_id`: the identity LangGraph Server's auth handler returned. The
       server sets it after authentication and refuses it from clients, so it is the one a
       caller cannot choose: `auth:<id>`.
    2. `user_id`: whoever invoked the graph said so; as trustworthy as that caller: `user:<id>`.
       (On LangGraph Server a client can put any `user_id` in its config: with auth on, rule 1
       wins; without, do not rely on it.) The prefixes differ, so a client-supplied id never
       reads an authenticated user's entries in a shared store.
    3. `thread_id`: `thread:<id>`.

    None (nothing cached, nothing served) when there is none of them.
    """
    conf = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(conf, Mapping):
        return None
    for key, tag in (
        ("langgraph_auth_user_id", "auth"),
        ("user_id", "user"),
        ("thread_id", "thread"),
    ):
        value = conf.get(key)
        if value is not None and value != "":
            return f"{tag}:{value}"
    return None


def store_label(namespace: str) -> str:
    """`namespace` as one label of a LangGraph store namespace, which may not be empty nor hold
    `.` or NUL: percent-encoded (`%`, `.`, NUL and other unsafe characters), `%` alone for "".
    Two namespaces never share a label; plain ids (`user:alice`) are left as they are."""
    return quote(namespace, safe=":@").replace(".", "%2E") or "%"


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
    survives restarts when the store does. Items live under `prefix + (store_label(namespace),)`:
    any namespace works, an e-mail address included.

    `store=None` uses the store of the graph run the tool is called in (LangGraph's
    `get_store()`), looked up at each call: on LangGraph Server, the server's own store, which a
    graph is handed only when it runs. A run without a store caches nothing and is served
    nothing (logged once).

    Raises:
        TypeError, ValueError: `store` neither a `BaseStore` nor None; `prefix` not a tuple of
            labels (a string is refused: it would be read letter by letter); a bad `ttl`.
    """

    def __init__(
        self,
        store: Any,
        *,
        ttl: float | None = None,
        prefix: tuple[str, ...] = ("langgraph_deadline", "stale"),
    ) -> None:
        from langgraph.store.base import BaseStore

        if store is not None and not isinstance(store, BaseStore):
            raise TypeError(
                f"store must be a langgraph BaseStore, or None for the running graph's, "
                f"got {type(store).__name__}"
            )
        self.store = store
        self.ttl = check_cap(ttl, "ttl")
        self.prefix = _check_prefix(prefix)
        self._said_storeless = False

    def _ns(self, namespace: str) -> tuple[str, ...]:
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
        return (*self.prefix, store_label(namespace))

    def _store(self) -> Any:
        """The store to use now: the one given, else the running graph's (None: there is none)."""
        if self.store is not None:
            return self.store
        from langgraph.config import get_store

        try:
            found = get_store()
        except RuntimeError:  # called outside a graph run
            found = None
        if found is None and not self._said_storeless:
            self._said_storeless = True
            log.warning(
                "StoreStaleCache(None) found no store in the running graph: nothing is cached "
                "(compile the graph with a store; LangGraph Server gives its own)"
            )
        return found

    def _hit(self, item: Any) -> CachedResult | None:
        if item is None:
            return None
        hit = CachedResult(item.value["content"], float(item.value["stored_at"]))
        if self.ttl is not None and hit.age() > self.ttl:
            return None
        return hit

    def get(self, namespace: str, key: str) -> CachedResult | None:
        store = self._store()
        return None if store is None else self._hit(store.get(self._ns(namespace), key))

    def put(self, namespace: str, key: str, content: Any) -> None:
        if (store := self._store()) is not None:
            value = {"content": content, "stored_at": time.time()}
            store.put(self._ns(namespace), key, value, index=False)

    async def aget(self, namespace: str, key: str) -> CachedResult | None:
        store = self._store()
        return None if store is None else self._hit(await store.aget(self._ns(namespace), key))

    async def aput(self, namespace: str, key: str, content: Any) -> None:
        if (store := self._store()) is not None:
            value = {"content": content, "stored_at": time.time()}
            await store.aput(self._ns(namespace), key, value, index=False)


def _check_prefix(prefix: object) -> tuple[str, ...]:
    if not isinstance(prefix, tuple | list) or not prefix:
        raise TypeError(
            "prefix must be a non-empty tuple of str labels, e.g. ('my_app', 'stale'), "
            f"got {type(prefix).__name__}: {show(prefix)}"
        )
    for label in prefix:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise ValueError(
                f"prefix labels must be non-empty str without '.' or NUL, got {show(label)}"
            )
    if prefix[0] == "langgraph":
        raise ValueError("prefix must not start with 'langgraph' (reserved by LangGraph)")
    return tuple(prefix)
