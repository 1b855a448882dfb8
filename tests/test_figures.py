"""The house's figures (#49) hold: measured by `tests/figures.py`, quoted in
docs/architecture.md ("The figures"). A ceiling below the issue's target is the target; one above
it is where the code stands today, and it only comes down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import figures

ROOT = Path(__file__).resolve().parents[1]

KEYWORDS = 10  # the target: no entry point takes more
LONG_FUNCTIONS = 6  # the target: at most 6 functions over 60 lines of code, none on the run's path
TWINS = 47  # today (the target is 25)
OUTSIDE = 0  # the target: no function stands outside the run's or the graph's class
RUN_MODULES = 24  # today (the target is 16)
RUN_LINES = 8_500  # today (the target is 5,500)
RUN_RATIO = 5.0  # today (the target is 3.0)


def test_no_entry_point_takes_more_than_10_keywords() -> None:
    counts = figures.keywords()
    assert "langgraph_deadline.with_deadlines" in counts  # the measure sees the entry points
    over = {name: n for name, n in counts.items() if n > KEYWORDS}
    assert not over, over


def test_at_most_6_functions_are_over_60_lines() -> None:
    long = figures.long_functions()
    assert len(long) <= LONG_FUNCTIONS, long


def test_the_sync_async_twins_do_not_grow() -> None:
    assert len(figures.twins()) <= TWINS


def test_no_function_stands_outside_the_run_or_the_graph() -> None:
    assert not figures.outside()


@pytest.fixture(scope="module")
def ordinary_run() -> dict[str, object]:
    """The ordinary run profiled in a fresh interpreter: nothing another test installed (an
    observer, a book) adds to what it executes."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.figures"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_ordinary_run_opens_no_more_of_the_package_than_today(
    ordinary_run: dict[str, object],
) -> None:
    modules = ordinary_run["modules"]
    assert isinstance(modules, dict)
    assert "_core/plan.py" in modules and "_tools/tool.py" in modules  # it measured the run
    assert len(modules) <= RUN_MODULES, sorted(modules)
    assert ordinary_run["lines"] <= RUN_LINES  # type: ignore[operator]
    assert ordinary_run["ratio"] <= RUN_RATIO  # type: ignore[operator]


def test_no_long_function_is_on_the_ordinary_runs_path(ordinary_run: dict[str, object]) -> None:
    ran = ordinary_run["functions"]
    assert isinstance(ran, list) and "_core/plan.py:plan" in ran
    assert not set(figures.long_functions()) & set(ran)


def test_the_figures_measure_what_they_say() -> None:
    """A function's code lines are its lines less its docstring's (the `def` line counts)."""
    import ast

    tree = ast.parse(
        "def f():\n    '''doc\n\n    more'''\n" + "    x = 1\n" * 60 + "async def af(): pass\n"
    )
    (f, af) = figures._functions(tree)
    assert figures._code_lines(f) == 61 and figures._code_lines(af) == 1
    # A run's method written outside it is found (quoted or not); a function that only hands
    # the run on, or takes something else first, is not.
    tree = ast.parse(
        "def ended(run: GraphRun) -> bool:\n    return run.outcome is not None\n"
        "def told(life: 'Run', x: int) -> None:\n    life.tracker.emitted = True\n"
        "def handed(run: GraphRun) -> object:\n    return Wrapper(run)\n"
        "def other(plan: Plan, run: GraphRun) -> None:\n    run.records.clear()\n"
    )
    assert figures._standing_outside(tree) == ["ended", "told"]


def test_the_architecture_page_quotes_the_ceilings() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## The figures", 1)[1].split("\n## ", 1)[0]
    for figure in (KEYWORDS, LONG_FUNCTIONS, TWINS, RUN_MODULES, f"{RUN_LINES:,}", RUN_RATIO):
        assert str(figure) in section, figure
