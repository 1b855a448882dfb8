"""The README's main job: `langgraph-deadline demo`, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import langgraph_deadline

# The package under test, not whichever one the interpreter has installed (a checkout in
# another directory, when the venv is shared).
SOURCE = str(Path(langgraph_deadline.__file__).resolve().parents[1])


@pytest.mark.timeout(180)
def test_demo_shows_the_naive_run_overshooting_and_the_deadline_runs_on_time(
    tmp_path: Path,
) -> None:
    plot = tmp_path / "waterfall.png"
    proc = subprocess.run(
        [sys.executable, "-m", "langgraph_deadline", "demo", "--budget", "4", "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        for key, label in (
            ("naive", "naive"),
            ("deadline", "langgraph-deadline "),
            ("hedged", "hedged lookups "),
            ("learned", "book attached "),
        ):
            if line.startswith(label):
                rows[key] = line.split()
    naive, ours, hedged, smart = rows["naive"], rows["deadline"], rows["hedged"], rows["learned"]
    # columns: label..., budget, wall, terminal..., lookups done at, lookups answered,
    # tool requests past deadline, tokens after
    naive_wall, ours_wall = float(naive[3]), float(ours[2])
    assert naive_wall > 4.0 + 2.0  # per-step timeouts add up
    assert ours_wall < 4.0 + 0.5
    assert "deadline_exceeded" in ours
    assert int(ours[-2]) == 0  # no tool request alive past the deadline
    assert int(ours[-1]) <= 1  # at most one token chunk after the deadline
    assert int(naive[-1]) > 50  # the naive run kept streaming (and paying for) tokens
    # columns: lookups answered, tool requests past deadline, tokens after
    assert (ours[-3], naive[-3]) == ("2/3", "2/3")  # the straggling lookup gave nothing
    assert float(naive[-4]) > 8.0  # the naive lookups waited for the hanging one's timeout
    assert 2.0 <= float(ours[-4]) < 2.5  # the deadline run's lookups: cut at the 2 s cap
    hedged_wall = float(hedged[3])
    assert hedged_wall < 4.0 + 0.5 and "deadline_exceeded" in hedged
    assert hedged[-3:-1] == ["3/3", "0"] and int(hedged[-1]) <= 1
    # A book attached, learned caps (p90 x 2 of the lookups' usual 0.3 to 0.5 s): the hanging
    # request is cut well before the 2 s cap, the writer starts that much earlier, and its
    # max_tokens from its learned rate ends its answer before the deadline: the run completes.
    smart_wall = float(smart[3])
    assert smart_wall < 4.0 - 0.2 and smart[4] == "completed"
    assert smart[-3:-1] == ["2/3", "0"] and int(smart[-1]) == 0
    assert float(smart[-4]) < float(ours[-4]) - 0.4
    # Progress: each step reported once, and a run cut at its deadline says where it ended.
    progress = [line.split() for line in proc.stdout.splitlines() if line.startswith("  ")]
    ours_steps = [p[3:] for p in progress if p[:1] == ["langgraph-deadline"] and p[2:3] == ["s"]]
    assert ours_steps == [
        ["planner", "done"],
        ["tools", "done"],
        ["writer", "cut", "at", "its", "budget"],
        ["run", "ended", "in", "writer"],
    ]
    naive_steps = [p[4:] for p in progress if p[:1] == ["naive"] and p[3:4] == ["s"]]
    assert naive_steps == [["planner", "done"], ["tools", "done"], ["writer", "done"]]
    book_steps = [p[4:] for p in progress if p[:2] == ["book", "attached"] and p[3:4] == ["s"]]
    assert book_steps[-1] == ["run", "completed"]  # the closing update is no node of its own
    learned_line = next(
        line for line in proc.stdout.splitlines() if line.startswith("learned caps:")
    )
    assert "warehouse_stock" in learned_line
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"waterfalls of the naive (8s/tool) and langgraph-deadline runs: {plot}" in proc.stdout
    assert " ended deadline_exceeded" not in proc.stderr  # the servers' log line, not the demo's
    # What each user received: the naive run's whole answer, late; the deadline run's answer
    # cut short, then what the tools had found and which one gave nothing in time.
    received = proc.stdout.split("What the user received:")[1]
    naive_answer, rest = received.split("  langgraph-deadline (after")
    ours_answer, rest = rest.split("  hedged lookups (after")
    hedged_answer, smart_answer = rest.split("  book attached (after")
    assert "thank you again for shopping with us" in " ".join(naive_answer.split())
    ours_text = " ".join(ours_answer.split())
    assert ours_text.count("Thanks for your patience.") == 1
    assert "[cut short: the time for this answer ran out]" in ours_text
    assert "- order_status: order 42 packed on Friday" in ours_text
    assert "No result in time from: warehouse_stock." in ours_text
    # The hedged run sent the straggling lookup again: all three found, and more of the answer.
    hedged_text = " ".join(hedged_answer.split())
    assert "- warehouse_stock: the missing item is back in stock" in hedged_text
    assert "No result in time" not in hedged_text
    assert len(hedged_text.split("[cut short")[0]) > len(ours_text.split("[cut short")[0])
    # The run with a book gave the writer the time the straggler no longer took, a max_tokens
    # that fits it and the length hint: the model (a stand-in that keeps to the length it is
    # asked for) answered whole sentences, not cut short, no closing reply.
    smart_text = (
        " ".join(smart_answer.split()).split("waterfalls of")[0].split("s): ", 1)[1].strip()
    )
    assert smart_text.startswith("Thanks for your patience. Your order 42 was packed")
    assert "[cut short" not in smart_text and "ran out of time" not in smart_text
    assert smart_text.endswith(".") and smart_text in " ".join(naive_answer.split())
