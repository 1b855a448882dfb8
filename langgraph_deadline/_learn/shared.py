"""One latency book for many workers: each process's sketches through a LangGraph `BaseStore`.

Each process writes its own sketches (its samples since it started) under its own key, so
writes never race; it reads every other key back and merges them. Nothing here runs on a step's
path: a write starts on a thread of its own, every `flush_every` samples or `flush_seconds`, one
at a time, and a failure is logged and tried again at the next flush. The store is duck-typed
(`put`, `search`): this layer imports no LangGraph.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .sketch import LatencySketch

if TYPE_CHECKING:
    from .book import LatencyBook

__all__ = ["Shared"]

log = logging.getLogger("langgraph_deadline")
_PAGE = 100


class Shared:
    """A book's link to a store: what the other workers learned, and when to write."""

    def __init__(
        self,
        book: LatencyBook,
        store: Any,
        *,
        namespace: tuple[str, ...],
        flush_every: int,
        flush_seconds: float,
    ) -> None:
        if not (callable(getattr(store, "put", None)) and callable(getattr(store, "search", None))):
            raise TypeError(f"store must be a LangGraph BaseStore, got {type(store).__name__}")
        if (
            not isinstance(namespace, tuple)
            or not namespace
            or not all(isinstance(label, str) and label and "." not in label for label in namespace)
        ):
            raise ValueError(
                f"namespace must be a tuple of strings without dots, got {namespace!r}"
            )
        self._book = book
        self._store = store
        self._namespace = namespace
        self._every = flush_every
        self._seconds = flush_seconds
        self.worker = uuid.uuid4().hex
        self._others: dict[tuple[str, str], LatencySketch] = {}
        self._written: dict[tuple[str, str], int] = {}
        self._pending = 0
        self._due = time.monotonic() + flush_seconds
        self._busy = threading.Lock()
        self._read()  # read back on start: what the others learned before this process

    def noted(self) -> None:
        """One more sample: start a flush on its own thread when one is due."""
        self._pending += 1
        if self._pending < self._every and time.monotonic() < self._due:
            return
        self._pending = 0
        self._due = time.monotonic() + self._seconds
        if not self._busy.locked():
            threading.Thread(target=self.flush, name="latency-book-flush", daemon=True).start()

    def flush(self) -> None:
        """Write this process's changed sketches, then read the others' (best effort)."""
        with self._busy:
            try:
                self._write()
                self._read()
            except Exception:
                log.warning("latency book: the store could not be reached", exc_info=True)

    def _write(self) -> None:
        book = self._book
        for kind, name in book.names():
            sketch = book.local(kind, name)
            if sketch is None or self._written.get((kind, name)) == sketch.count:
                continue
            value = {"kind": kind, "name": name, "worker": self.worker, "sketch": sketch.to_dict()}
            self._store.put(self._namespace, f"{kind}:{name}:{self.worker}", value)
            self._written[(kind, name)] = sketch.count

    def _read(self) -> None:
        others: dict[tuple[str, str], LatencySketch] = {}
        offset = 0
        while True:
            items = self._store.search(self._namespace, limit=_PAGE, offset=offset)
            for item in items:
                value = item.value
                if value.get("worker") == self.worker:
                    continue
                try:
                    key = (str(value["kind"]), str(value["name"]))
                    sketch = LatencySketch.from_dict(value["sketch"])
                except (KeyError, TypeError, ValueError):
                    log.warning("latency book: skipped a malformed entry %r", item.key)
                    continue
                others[key] = others[key].merge(sketch) if key in others else sketch
            if len(items) < _PAGE:
                break
            offset += _PAGE
        self._others = others
        for (kind, name), sketch in others.items():
            self._book.note_shared(kind, name, sketch.count)

    def with_others(self, mine: LatencySketch, name: str, kinds: Iterable[str]) -> LatencySketch:
        """`mine` with what the other workers hold for `name` under `kinds`."""
        others = self._others
        for kind in kinds:
            theirs = others.get((kind, name))
            if theirs is not None:
                mine = mine.merge(theirs)
        return mine
