"""A JSON-lines trace read back: the runs, their step records, and the lines that were not events.

Reads what `JsonlTraceWriter` wrote; `langgraph-deadline report` and the plot start from here.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .._core.records import CutShort, StepRecord, Terminal

__all__ = ["Trace", "TraceRun", "cut_short", "read_trace"]


@dataclasses.dataclass(frozen=True, slots=True)
class TraceRun:
    """One run of a trace: its steps in the order they ended, and its run line when there is
    one (`terminal` None: the trace has no run line for it, e.g. a run still going)."""

    run_id: str
    steps: tuple[StepRecord, ...]
    terminal: Terminal | None = None
    ended_at: str | None = None  # the step where the run ended
    elapsed_ms: float | None = None
    started_at: float | None = None
    deadline_at: float | None = None
    reserve_ms: float = 0.0

    @property
    def budget_ms(self) -> float | None:
        if self.deadline_at is None or self.started_at is None:
            return None
        return (self.deadline_at - self.started_at) * 1000.0

    @property
    def origin(self) -> float | None:
        """Epoch seconds of the run's start (its first step's when there is no run line)."""
        if self.started_at is not None:
            return self.started_at
        starts = [s.started_at for s in self.steps if s.started_at]
        return min(starts) if starts else None


@dataclasses.dataclass(frozen=True, slots=True)
class Trace:
    """Runs in the order they first appear; `loose` holds steps outside any run."""

    runs: tuple[TraceRun, ...]
    loose: tuple[StepRecord, ...] = ()
    bad_lines: int = 0

    def run(self, run_id: str | None = None) -> TraceRun:
        """The run `run_id` (a unique prefix will do). By default the slowest run relative to
        its budget (the largest share of its budget used, or the longest when runs have no
        deadline); the last one on a tie; the last run when none has a run line.

        Raises:
            LookupError: no such run, or the trace has none.
        """
        if not self.runs:
            raise LookupError("the trace has no runs")
        if run_id is None:
            timed = [r for r in self.runs if r.elapsed_ms is not None]
            if not timed:
                return self.runs[-1]
            return max(reversed(timed), key=_slowness)
        found = [r for r in self.runs if r.run_id.startswith(run_id)]
        if len(found) != 1:
            what = "no run" if not found else f"{len(found)} runs"
            raise LookupError(f"{what} with id {run_id!r} in the trace")
        return found[0]


def cut_short(steps: Sequence[StepRecord]) -> list[bool]:
    """For each of a run's records, in order: whether the step was cut short, itself (skipped,
    timed out, abandoned, answered stale after a cut) or in a step it ran (`CutShort`). Its
    time is then no sample of how long it takes: at most a bound below it."""
    told = CutShort()
    return [told.short(rec) for rec in steps]


def _slowness(run: TraceRun) -> tuple[float, float]:
    elapsed = run.elapsed_ms or 0.0
    budget = run.budget_ms
    return (elapsed / budget if budget else 0.0, elapsed)


def read_trace(paths: Iterable[str | os.PathLike[str]]) -> Trace:
    """Read JSON-lines traces (as written by `JsonlTraceWriter`). Tokens-after-deadline lines are
    skipped; other lines that are not step or run events are counted in `bad_lines`.

    Raises:
        OSError: a file cannot be read.
    """
    steps: dict[str | None, list[StepRecord]] = {}
    runs: dict[str, dict[str, Any]] = {}
    bad = 0
    for path in paths:
        with Path(path).open(encoding="utf-8") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    kind = data.get("event")
                    if kind == "step":
                        steps.setdefault(data.get("run_id"), []).append(StepRecord.from_dict(data))
                    elif kind == "run":
                        runs[str(data["run_id"])] = data
                        steps.setdefault(str(data["run_id"]), [])
                    elif kind == "tokens_after_deadline":
                        continue  # counted by the metrics backends, not part of the report
                    else:
                        bad += 1
                except (ValueError, KeyError, TypeError, AttributeError):
                    bad += 1
    loose = tuple(steps.pop(None, []))
    out = []
    for run_id, records in steps.items():
        info = runs.get(str(run_id), {})
        terminal = info.get("terminal")
        out.append(
            TraceRun(
                run_id=str(run_id),
                steps=tuple(records),
                terminal=_terminal(terminal),
                ended_at=info.get("step"),
                elapsed_ms=info.get("elapsed_ms"),
                started_at=info.get("started_at"),
                deadline_at=info.get("deadline_at"),
                reserve_ms=info.get("reserve_ms") or 0.0,
            )
        )
    return Trace(runs=tuple(out), loose=loose, bad_lines=bad)


def _terminal(value: object) -> Terminal | None:
    try:
        return Terminal(value) if isinstance(value, str) else None
    except ValueError:
        return None
