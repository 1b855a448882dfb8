"""Trace export: every step and run event as one JSON line, for `langgraph-deadline report`."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from .._core.observe import RunEvent, StepEvent, TokensEvent, run_fields, step_fields

__all__ = ["TRACE_VERSION", "JsonlTraceWriter"]

log = logging.getLogger("langgraph_deadline")

TRACE_VERSION: Final = 1


class JsonlTraceWriter:
    """An observer that appends one JSON object per line to `path`: one per step
    (`{"event": "step", "run_id": ..., "name": ..., "elapsed_ms": ..., ...}`) and one per run
    (`{"event": "run", "run_id": ..., "terminal": ..., "started_at": ..., "deadline_at": ...}`),
    and one per model step that streamed tokens after its deadline
    (`{"event": "tokens_after_deadline", "step": ..., "tokens": ..., "run_id": ...}`).

    The fields are those of `step_fields` / `run_fields`: names and numbers, nothing from the
    state. Safe to share between threads; each line is flushed as it is written, so a crashed
    process leaves a readable trace. `close()` it (or use it as a context manager) when done.

    Raises:
        OSError: `path` cannot be opened for appending.
    """

    __slots__ = ("_file", "_lock", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def on_step(self, event: StepEvent) -> None:
        self._write({"v": TRACE_VERSION, "event": "step", **step_fields(event)})

    def on_run(self, event: RunEvent) -> None:
        self._write({"v": TRACE_VERSION, "event": "run", **run_fields(event)})

    def on_tokens_after_deadline(self, event: TokensEvent) -> None:
        self._write(
            {
                "v": TRACE_VERSION,
                "event": "tokens_after_deadline",
                "run_id": event.run_id,
                "step": event.step,
                "tokens": event.tokens,
            }
        )

    def _write(self, data: dict[str, Any]) -> None:
        line = json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n"
        with self._lock:
            if self._file is None:
                log.debug("JsonlTraceWriter(%s) is closed: event dropped", self.path)
                return
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        """Close the file; later events are dropped."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlTraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JsonlTraceWriter({str(self.path)!r})"
