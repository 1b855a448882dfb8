"""The report's figure: a node drawn in the colour of the worst step inside it, a distribution
only when there are enough runs to show one, and the answers the user received."""

from __future__ import annotations

import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline._report.stats import step_stats
from langgraph_deadline._report.trace import Trace, TraceRun
from langgraph_deadline.types import StepStatus

pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from langgraph_deadline._report.plot import (
    MIN_SAMPLES,
    STATUS_COLORS,
    _figure,
)

T0 = 1_700_000_000.0


def _rec(name: str, kind: str, start: float, elapsed_ms: float, status: StepStatus) -> StepRecord:
    return StepRecord(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        attempt=1,
        remaining_ms=4000.0,
        requested_ms=2000.0,
        allocated_ms=2000.0,
        clamped=False,
        elapsed_ms=elapsed_ms,
        status=status,
        started_at=T0 + start,
    )


def _run(run_id: str) -> TraceRun:
    return TraceRun(
        run_id=run_id,
        steps=(
            _rec("fast", "tool", 0.1, 300.0, StepStatus.COMPLETED),
            _rec("slow", "tool", 0.1, 2000.0, StepStatus.TIMED_OUT),
            _rec("tools", "node", 0.1, 2005.0, StepStatus.COMPLETED),
            _rec("writer", "node", 2.2, 100.0, StepStatus.COMPLETED),
        ),
        started_at=T0,
        deadline_at=T0 + 4.0,
    )


def _bar_colours(run: TraceRun, trace: Trace) -> dict[str, str]:
    """The colour of each step's "used" bar, by the step's name, in the waterfall."""
    fig = _figure(run, step_stats(trace), ())
    waterfall = fig.axes[0]
    names = [t.get_text().removeprefix("↳ ").split(" (")[0] for t in waterfall.get_yticklabels()]
    used = [
        p
        for p in waterfall.patches
        if isinstance(p, Rectangle) and p.get_height() == pytest.approx(0.4)
    ]
    ys = [round(p.get_y() + p.get_height() / 2) for p in used]
    return {names[y]: to_hex(p.get_facecolor()) for y, p in zip(ys, used, strict=True)}


def test_a_node_is_drawn_in_the_colour_of_the_worst_step_inside_it() -> None:
    run = _run("r1")
    colours = _bar_colours(run, Trace(runs=(run,)))
    assert colours["tools"] == STATUS_COLORS[StepStatus.TIMED_OUT]  # completed, one tool cut
    assert colours["slow"] == STATUS_COLORS[StepStatus.TIMED_OUT]
    assert colours["fast"] == STATUS_COLORS[StepStatus.COMPLETED]
    assert colours["writer"] == STATUS_COLORS[StepStatus.COMPLETED]  # nothing inside it


def test_one_run_shows_no_distribution_and_the_answers_get_a_panel_each() -> None:
    run = _run("r1")
    one = step_stats(Trace(runs=(run,)))
    assert len(_figure(run, one, ()).axes) == 1  # the waterfall alone
    answers = (("naive", "late but whole"), ("deadline", "on time, cut short"))
    fig = _figure(run, one, answers)
    assert len(fig.axes) == 3
    texts = [t.get_text() for ax in fig.axes[1:] for t in ax.texts]
    assert texts == ["late but whole", "on time, cut short"]
    assert fig.axes[1].get_title(loc="left") == "what the user received: naive"

    many = Trace(runs=tuple(_run(f"r{i}") for i in range(MIN_SAMPLES)))
    assert len(_figure(run, step_stats(many), ()).axes) == 2  # waterfall and distribution


def test_the_run_is_named_by_its_title_and_runs_beside_it_share_its_time_axis() -> None:
    run, naive = _run("4f1c2a9e77d0b3c5"), _run("naive")
    late = TraceRun(
        run_id="naive",
        steps=(_rec("tools", "node", 0.1, 8000.0, StepStatus.COMPLETED),),
        started_at=T0,
        deadline_at=T0 + 4.0,
    )
    fig = _figure(run, (), (), title="with one deadline", beside=[("naive timeouts", late)])
    top, ours = fig.axes[:2]
    assert top.get_title(loc="left").startswith("naive timeouts: ")
    assert ours.get_title(loc="left").startswith("with one deadline: ")
    assert "4f1c2a9e" not in ours.get_title(loc="left")  # named, not a random id
    assert top.get_xlim() == ours.get_xlim()  # one time axis
    assert top.get_xlim()[1] > 8000.0  # wide enough for the longest run
    # Without a title, a run is still named by its id.
    assert _figure(naive, (), ()).axes[0].get_title(loc="left").startswith("run naive: ")
