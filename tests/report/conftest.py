"""A hand-written trace: ten healthy runs, one where `fetch` hung, one with abandoned work, two
bad lines and a step outside any run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

T0 = 1_700_000_000.0


def _step(run: str | None, name: str, elapsed: float, status: str = "completed", **kw: Any) -> str:
    data = {
        "v": 1,
        "event": "step",
        "run_id": run,
        "deadline_at": T0 + 1.0,
        "name": name,
        "kind": kw.pop("kind", "node"),
        "attempt": 1,
        "status": status,
        "remaining_ms": 1000.0,
        "requested_ms": None,
        "allocated_ms": kw.pop("allocated", 1000.0),
        "clamped": True,
        "elapsed_ms": elapsed,
        "side_effect_started": False,
        "cancel_source": None,
        "started_at": kw.pop("started_at", T0),
    }
    return json.dumps(data)


def _run(run: str, terminal: str, elapsed: float, step: str | None = None) -> str:
    return json.dumps(
        {
            "v": 1,
            "event": "run",
            "run_id": run,
            "terminal": terminal,
            "step": step,
            "elapsed_ms": elapsed,
            "started_at": T0,
            "deadline_at": T0 + 1.0,
            "budget_ms": 1000.0,
            "reserve_ms": 100.0,
        }
    )


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    lines = []
    for i in range(10):  # healthy runs: fetch takes 10..100 ms, answer 50 ms
        run = f"ok{i}"
        lines += [_step(run, "fetch", 10.0 * (i + 1)), _step(run, "answer", 50.0)]
        lines.append(_run(run, "completed", 10.0 * (i + 1) + 50.0))
    # one run where fetch hung: cut at its budget, answer skipped
    lines += [
        _step("late", "fetch", 900.0, "timed_out", allocated=900.0),
        _step("late", "answer", 0.0, "skipped", allocated=0.0),
        _run("late", "deadline_exceeded", 905.0, step="fetch"),
    ]
    # a run that completed although fetch was slow, with sync work abandoned in `audit`
    lines += [
        _step("odd", "fetch", 700.0),
        _step("odd", "audit", 120.0, "abandoned", allocated=100.0),
        _run("odd", "deadline_exceeded", 830.0, step="audit"),
        "not json",
        json.dumps({"event": "something else"}),
        _step(None, "fetch", 5.0),  # a step outside any run
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path
