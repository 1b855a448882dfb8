"""`LatencyBook`: every step record, kept as a latency sketch per step kind and name.

A book is an observer (`on_step`, `on_run`): it hears every step of the process from the moment
it is made (`listen=False` to feed it yourself with `record`), held weakly, and apart from the
instrumentation (`set_observers([])` does not silence it). It keeps names and durations only:
no arguments, no user data. A finished step is a sample; a step cut at its budget (timed out,
abandoned, or answered stale from a cache after a timeout) is a censored one, "longer than
this", and so is a step that completed after a step inside it was cut short; steps skipped,
failed or cancelled by a caller teach nothing about their duration.

With a LangGraph `BaseStore` the book is shared by every process that uses the same store and
namespace: each process writes its own sketches, every `flush_every` samples or
`flush_seconds`, on a thread of its own (best effort: a failed write is logged and retried at
the next flush), and reads the others' back on start and at each flush, at least every
`flush_seconds`, idle or not (`Shared`, below). The books of one process that hear its steps
share one entry per namespace: made twice, a book does not count the process's samples twice.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import weakref
from array import array
from collections.abc import Iterable
from typing import Any, Final

from .._core.observe import RunEvent, StepEvent, unlisten
from .._core.observe import listen as _listen
from .._core.records import CutShort, StepKind, StepRecord, StepStatus
from .._core.validate import check_seconds
from .sketch import BUCKETS, LatencySketch, bucket_of, empty_counts

__all__ = ["FIRST_TOKEN", "GAP", "KINDS", "PER_TOKEN", "LatencyBook", "Tally", "sample_of"]

log = logging.getLogger("langgraph_deadline")
_PAGE = 100  # store entries read per search

KINDS: Final[tuple[StepKind, ...]] = ("node", "tool", "model", "http")
FIRST_TOKEN: Final = "first_token"
"""A model's time to its first streamed token, keyed by model id (fed by `_agents/timing.py`)."""
PER_TOKEN: Final = "per_token"
"""A model's seconds per output token once it streams: its output rate, inverted (a duration,
so the same sketch keeps it; a high quantile is a slow day's rate)."""
GAP: Final = "gap"
"""A step's longest gap with no progress (between two chunks of a model's stream, two reads of
a response body, two heartbeats of a node), keyed by step name: what a learned idle cap is
learned from (`StepRecord.gap_ms`, for a step with an idle cap). A step cut mid-gap is a
censored sample of it, "at least this long"."""
_CENSORED: Final = frozenset({StepStatus.TIMED_OUT, StepStatus.ABANDONED, StepStatus.STALE})
Key = tuple[str, str]  # (kind, name)
_CUT_KEPT: Final = 4096
"""How many steps with a step cut short inside them a book remembers until their own record."""


def sample_of(record: StepRecord) -> tuple[float, bool] | None:
    """What a book learns from one step record: (seconds, censored), or None (see the module)."""
    status = record.status
    if status is StepStatus.COMPLETED:
        return record.elapsed_ms / 1000.0, False
    if status in _CENSORED:
        return record.elapsed_ms / 1000.0, True
    return None


class Tally:
    """One key's counts in this process (mutable, under the book's lock)."""

    __slots__ = ("censored", "count", "finished", "hi", "lo", "shared")

    def __init__(self) -> None:
        self.finished: array[int] = empty_counts()
        self.censored: array[int] = empty_counts()
        self.count = 0
        self.lo = BUCKETS  # the buckets used: lo .. hi-1
        self.hi = 0
        self.shared = 0  # samples from other processes (read from the store)

    def add(self, i: int, censored: bool) -> None:
        (self.censored if censored else self.finished)[i] += 1
        self.count += 1
        if i < self.lo:
            self.lo = i
        if i >= self.hi:
            self.hi = i + 1

    def sketch(self) -> LatencySketch:
        lo, hi = self.lo, self.hi
        if lo >= hi:
            return LatencySketch()
        return LatencySketch(lo, self.finished[lo:hi], self.censored[lo:hi])

    def add_sketch(self, sketch: LatencySketch) -> None:
        f, c = sketch.counts()
        for i, (a, b) in enumerate(zip(f, c, strict=True)):
            if a or b:
                self.finished[i] += a
                self.censored[i] += b
                self.lo = min(self.lo, i)
                self.hi = max(self.hi, i + 1)
        self.count += sketch.count


class LatencyBook:
    """Per-step latency sketches learned from the step records of this process (and of the
    others sharing its `store`). Hand it to `learned(book, ...)`; read it with `sketch`.

    Args:
        store: a LangGraph `BaseStore` (`InMemoryStore`, `PostgresStore`) to share the book
            through, or None (this process only).
        namespace: where in the store.
        flush_every: write to the store after that many new samples, or after
            `flush_seconds`, whichever comes first.
        flush_seconds: write to the store after that many seconds, or after `flush_every`
            new samples, whichever comes first.
        max_keys: at most this many (kind, name) keys; steps under new names past it are not
            recorded (a bound on memory: 20 KiB per key).
        listen: hear every step of the process (else feed it with `record`). Books that
            listen hold the same samples: with one store namespace they share one entry.

    Raises:
        TypeError, ValueError: a bad number, a `store` without `put`/`search`, a namespace
            that is not a tuple of strings.
    """

    def __init__(
        self,
        *,
        store: Any = None,
        namespace: tuple[str, ...] = ("langgraph_deadline", "latency"),
        flush_every: int = 256,
        flush_seconds: float = 10.0,
        max_keys: int = 1024,
        listen: bool = True,
    ) -> None:
        for label, value in (("flush_every", flush_every), ("max_keys", max_keys)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be an int >= 1, got {value!r}")
        check_seconds(flush_seconds, "flush_seconds")
        if not isinstance(listen, bool):
            raise TypeError(f"listen must be True or False, got {listen!r}")
        self._lock = threading.Lock()
        self._tallies: dict[Key, Tally] = {}
        self._cut = CutShort(keep=_CUT_KEPT)  # which steps were cut short, inside them too
        self._max_keys = max_keys
        self._shared: Shared | None = None
        if store is not None:
            self._shared = Shared(
                self,
                store,
                namespace=namespace,
                flush_every=flush_every,
                flush_seconds=flush_seconds,
                listening=listen,
            )
        if listen:
            _listen(self)

    # -- writing (the hot path) ----------------------------------------------------------------

    def on_step(self, event: StepEvent) -> None:
        """Observer hook: one step record, one sample (or none, see the module)."""
        self.add(event.record)

    def on_run(self, event: RunEvent) -> None:
        """Observer hook: runs teach the book nothing."""

    def add(self, record: StepRecord) -> None:
        """Record one step: finished, censored at its cut, or nothing. A step that completed
        after a step inside it was cut short (a `tools` node whose tool call timed out) is
        censored too: its time is a bound below what it takes. Records come as steps end, the
        steps inside a step before it (their `parent` is its `link`)."""
        with self._lock:
            short = self._cut.short(record)
        sample = sample_of(record)
        if sample is None:
            return
        seconds, censored = sample
        self.record(record.kind, record.name, seconds, censored=censored or short)
        if record.gap_ms is not None:
            self.record(GAP, record.name, record.gap_ms / 1000.0, censored=censored)

    def record(self, kind: str, name: str, seconds: float, *, censored: bool = False) -> None:
        """Record one duration of the step `(kind, name)`: it finished in `seconds`, or
        (`censored`) it was cut at `seconds`, still running."""
        i = bucket_of(seconds)
        key = (kind, name)
        with self._lock:
            tally = self._tallies.get(key)
            if tally is None:
                if len(self._tallies) >= self._max_keys:
                    return
                tally = self._tallies[key] = Tally()
            tally.add(i, censored)
        if self._shared is not None:
            self._shared.noted()

    # -- reading -------------------------------------------------------------------------------

    def count(self, name: str, kind: str = "node") -> int:
        """Samples of `(kind, name)`, this process's and the store's (cheap: no copy)."""
        tally = self._tallies.get((kind, name))
        return 0 if tally is None else tally.count + tally.shared

    def sketch(self, name: str, kind: str | None = None) -> LatencySketch:
        """A snapshot of `(kind, name)`'s durations (all kinds under `name` when `kind` is
        None), with what other processes shared through the store."""
        kinds: Iterable[str] = KINDS if kind is None else (kind,)
        mine = LatencySketch()
        with self._lock:
            for k in kinds:
                tally = self._tallies.get((k, name))
                if tally is not None:
                    mine = mine.merge(tally.sketch())
        if self._shared is None:
            return mine
        return self._shared.with_others(mine, name, kinds)

    def seconds_at(self, name: str, kind: str, quantile: float) -> float | None:
        """The learned `quantile` of `(kind, name)`, in seconds (None: no samples)."""
        estimate = self.sketch(name, kind).quantile(quantile)
        return None if estimate is None else estimate.seconds

    def names(self) -> list[tuple[str, str]]:
        """The (kind, name) keys with samples, sorted."""
        with self._lock:
            return sorted(self._tallies)

    def local(self, kind: str, name: str) -> LatencySketch | None:
        """This process's own samples of one key (what it shares), or None."""
        with self._lock:
            tally = self._tallies.get((kind, name))
            return None if tally is None else tally.sketch()

    def merge(self, other: LatencyBook) -> None:
        """Add another book's samples to this one's (for books kept apart, then joined)."""
        for kind, name in other.names():
            sk = other.local(kind, name)
            if sk is not None:
                self.add_sketch(kind, name, sk)

    def add_sketch(self, kind: str, name: str, sketch: LatencySketch) -> None:
        """Add a sketch's samples to `(kind, name)` as this process's own."""
        with self._lock:
            tally = self._tallies.get((kind, name))
            if tally is None:
                tally = self._tallies[(kind, name)] = Tally()
            tally.add_sketch(sketch)

    def note_shared(self, kind: str, name: str, count: int) -> None:
        """How many samples other processes hold for a key (set by the store sync)."""
        with self._lock:
            tally = self._tallies.get((kind, name))
            if tally is None:
                if len(self._tallies) >= self._max_keys:
                    return
                tally = self._tallies[(kind, name)] = Tally()
            tally.shared = count

    def flush(self) -> None:
        """Write this process's sketches to the store and read the others' now (no store:
        nothing). Waits for the write; errors are logged, not raised."""
        if self._shared is not None:
            self._shared.flush()

    def detach(self) -> None:
        """Stop hearing the process's steps (the book keeps what it learned)."""
        unlisten(self)

    def bytes_per_key(self) -> int:
        """Memory held per key: the two count arrays (the sketch's bound)."""
        tally = Tally()
        return tally.finished.itemsize * (len(tally.finished) + len(tally.censored))

    def __repr__(self) -> str:
        return f"LatencyBook(keys={len(self._tallies)}, shared={self._shared is not None})"


# -- sharing through a store ---------------------------------------------------------------------


class Shared:
    """A book's link to a store: what the other workers learned, and when to write.

    Each process writes its own sketches (its samples since it started) under its own key, so
    writes never race; it reads every other key back and merges them. Nothing here runs on a
    step's path: a write starts on a thread of its own, one at a time, and a timer flushes every
    `flush_seconds` too, so an idle worker still writes what it learned and reads what the
    others learned. The store is duck-typed (`put`, `search`): this layer imports no LangGraph.

    Books that hear every step of the process hold the same samples: they share one key per
    namespace and process (LangGraph Server runs a graph module once per graph it names, so a
    module-level book is made several times), and the process's samples count once.
    """

    def __init__(
        self,
        book: LatencyBook,
        store: Any,
        *,
        namespace: tuple[str, ...],
        flush_every: int,
        flush_seconds: float,
        listening: bool = False,
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
        self._book = weakref.ref(book)  # the book holds its link, not the other way round
        self._store = store
        self._namespace = namespace
        self._every = flush_every
        self._seconds = flush_seconds
        self.worker = _listeners_key(namespace) if listening else uuid.uuid4().hex
        self._others: dict[tuple[str, str], LatencySketch] = {}
        self._written: dict[tuple[str, str], int] = {}
        self._pending = 0
        self._due = time.monotonic() + flush_seconds
        self._busy = threading.Lock()
        self._read()  # read back on start: what the others learned before this process
        stop = threading.Event()
        weakref.finalize(self, stop.set)
        timer = threading.Thread(
            target=_tick,
            args=(weakref.ref(self), stop, flush_seconds),
            name="latency-book-timer",
            daemon=True,
        )
        timer.start()

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
        book = self._book()
        if book is None:
            return
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
        book = self._book()
        for (kind, name), sketch in others.items():
            if book is not None:
                book.note_shared(kind, name, sketch.count)

    def with_others(self, mine: LatencySketch, name: str, kinds: Iterable[str]) -> LatencySketch:
        """`mine` with what the other workers hold for `name` under `kinds`."""
        others = self._others
        for kind in kinds:
            theirs = others.get((kind, name))
            if theirs is not None:
                mine = mine.merge(theirs)
        return mine


_LISTENERS: dict[tuple[int, tuple[str, ...]], str] = {}
_LISTENERS_LOCK = threading.Lock()


def _listeners_key(namespace: tuple[str, ...]) -> str:
    """The key of the books of this process that hear all its steps, under `namespace` (per
    process id: a forked child gets its own)."""
    with _LISTENERS_LOCK:
        return _LISTENERS.setdefault((os.getpid(), namespace), uuid.uuid4().hex)


def _tick(shared: weakref.ref[Shared], stop: threading.Event, seconds: float) -> None:
    """Flush every `seconds` until the book is gone."""
    while not stop.wait(seconds):
        linked = shared()
        if linked is None:
            return
        linked.flush()
        del linked
