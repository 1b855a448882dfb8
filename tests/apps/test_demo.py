"""The README's main job: `langgraph-deadline demo`, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(180)
def test_demo_shows_the_naive_run_overshooting_and_the_deadline_run_on_time(
    tmp_path: Path,
) -> None:
    plot = tmp_path / "waterfall.png"
    proc = subprocess.run(
        [sys.executable, "-m", "langgraph_deadline", "demo", "--budget", "4", "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith(("naive", "langgraph-deadline ")):
            cells = line.split()
            rows["naive" if line.startswith("naive") else "deadline"] = cells
    naive, ours = rows["naive"], rows["deadline"]
    # columns: label..., budget, wall, terminal..., tool requests past deadline, tokens after
    naive_wall, ours_wall = float(naive[3]), float(ours[2])
    assert naive_wall > 4.0 + 2.0  # per-step timeouts add up
    assert ours_wall < 4.0 + 0.5
    assert "deadline_exceeded" in ours
    assert int(ours[-2]) == 0  # no tool request alive past the deadline
    assert int(ours[-1]) <= 1  # at most one token chunk after the deadline
    assert int(naive[-1]) > 50  # the naive run kept streaming (and paying for) tokens
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
