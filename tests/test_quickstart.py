"""examples/quickstart.py, the complete program the README links to, runs and shows both ends."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_quickstart_runs_out_in_search_and_serves_the_stale_stock_level() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.quickstart"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "ran out of time in search"
    assert lines[1] == '{"path": "/slow", "delay": 0.0}'
    assert lines[2].startswith("[stale result from ")
    assert "the live call to 'stock_level' timed out" in lines[2]
    assert lines[3] == '{"path": "/slow", "delay": 0.0}'
    assert "Traceback" not in done.stderr
