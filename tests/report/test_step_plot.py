"""`report --plot-steps`: each step's durations, finished and cut apart, with its learned
quantiles and caps. The numbers come from `step_distributions` (pure) and are what the figure
draws."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_deadline import StepRecord
from langgraph_deadline.__main__ import main
from langgraph_deadline._report.step_plot import Mark, step_distributions
from langgraph_deadline._report.trace import Trace, TraceRun
from langgraph_deadline.learn import LatencyBook, LatencySketch, learned
from langgraph_deadline.types import StepStatus

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _rec(
    name: str,
    elapsed_ms: float,
    status: StepStatus = StepStatus.COMPLETED,
    *,
    kind: str = "tool",
    cap_ms: float | None = 2000.0,
) -> StepRecord:
    return StepRecord(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        attempt=1,
        remaining_ms=4000.0,
        requested_ms=cap_ms,
        allocated_ms=cap_ms,
        clamped=False,
        elapsed_ms=elapsed_ms,
        status=status,
    )


FINISHED = [100.0 + 10.0 * i for i in range(56)]  # 100 .. 650 ms
CUT = [2000.0] * 4  # four calls cut at their 2 s cap


def _trace() -> Trace:
    search = [_rec("search", ms) for ms in FINISHED]
    search += [_rec("search", ms, StepStatus.TIMED_OUT) for ms in CUT]
    search += [
        _rec("search", 0.0, StepStatus.SKIPPED),  # teaches nothing: neither finished nor cut
        _rec("search", 30.0, StepStatus.FAILED),
    ]
    # the same name as a node, and a short step with few samples and no cap
    other = [_rec("search", 700.0, kind="node", cap_ms=None) for _ in range(3)]
    other += [_rec("answer", 50.0, kind="node", cap_ms=None) for _ in range(5)]
    return Trace(runs=(TraceRun(run_id="r", steps=tuple(search + other)),))


def test_the_numbers_are_the_books() -> None:
    (dist,) = step_distributions(_trace(), steps=["tool:search"])
    assert (dist.kind, dist.name) == ("tool", "search")
    assert dist.finished == tuple(FINISHED)
    assert dist.cut == tuple(CUT)  # counted apart; skipped and failed calls left out
    assert sum(dist.finished_counts) == len(FINISHED)
    assert sum(dist.cut_counts) == len(CUT)
    assert dist.cut_counts[-1] == len(CUT)  # the slowest bin holds the cuts
    assert len(dist.edges) == len(dist.finished_counts) + 1
    assert dist.edges[0] == pytest.approx(100.0) and dist.edges[-1] == pytest.approx(2000.0)

    sketch = LatencySketch.of(
        finished=[ms / 1000 for ms in FINISHED], censored=[ms / 1000 for ms in CUT]
    )
    marks = {m.label: m for m in dist.marks}
    for q in (0.5, 0.9, 0.99):
        est = sketch.quantile(q)
        assert est is not None
        mark = marks[f"p{q * 100:g}"]
        assert mark.ms == pytest.approx(est.seconds * 1000)
        assert mark.at_least == est.at_least
    assert not marks["p50"].at_least
    assert marks["p99"].at_least  # among the cut calls: 2 s or more

    book = LatencyBook(listen=False)
    for ms in FINISHED:
        book.record("tool", "search", ms / 1000)
    for ms in CUT:
        book.record("tool", "search", ms / 1000, censored=True)
    cap = learned(book).cap("tool", "search")  # the report's settings are learned()'s defaults
    assert cap is not None
    assert marks["learned cap"].ms == pytest.approx(cap * 1000) == dist.learned_cap_ms
    assert marks["ran with"] == Mark("ran with", 2000.0)


def test_below_min_samples_there_is_no_learned_cap_and_an_uncapped_step_no_ran_with() -> None:
    (dist,) = step_distributions(_trace(), steps=["answer"])
    assert dist.learned_cap_ms is None
    assert [m.label for m in dist.marks] == ["p50", "p90", "p99"]
    assert "no learned cap below 50 samples" in dist.title(0.99, 1.5)


def test_caps_that_varied_are_shown_by_their_median_and_range() -> None:
    steps = [_rec("fetch", 100.0, cap_ms=cap) for cap in (400.0, 500.0, 900.0)]
    (dist,) = step_distributions(Trace(runs=(TraceRun(run_id="r", steps=tuple(steps)),)))
    (ran,) = [m for m in dist.marks if m.label == "ran with"]
    assert ran.ms == 500.0
    assert ran.text() == "ran with 500 ms (median; 400 to 900 ms)"


def test_by_default_the_steps_with_the_most_time_and_a_name_takes_every_kind() -> None:
    trace = _trace()
    top = step_distributions(trace, top=2)
    assert [(d.kind, d.name) for d in top] == [("tool", "search"), ("node", "search")]
    both = step_distributions(trace, steps=["search", "answer"])
    assert [(d.kind, d.name) for d in both] == [
        ("node", "search"),
        ("tool", "search"),
        ("node", "answer"),
    ]
    with pytest.raises(LookupError, match="no finished or cut step 'nope'"):
        step_distributions(trace, steps=["nope"])


def test_the_figure_draws_those_numbers(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.lines import Line2D

    from langgraph_deadline._report.step_plot import _figure, write_step_plot

    dists = step_distributions(_trace(), steps=["tool:search", "answer"])
    fig = _figure(dists, 0.99, 1.5)
    assert len(fig.axes) == 2
    for ax, dist in zip(fig.axes, dists, strict=True):
        assert ax.get_xscale() == "log"
        lines = [line for line in ax.get_lines() if isinstance(line, Line2D)]
        assert [line.get_xdata()[0] for line in lines] == [m.ms for m in dist.marks]
        bars = [p.get_height() for p in ax.patches]
        n = len(dist.finished_counts)
        assert bars == [*dist.finished_counts, *dist.cut_counts]
        assert len(bars) == 2 * n
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:2] == ["finished (56)", "cut at its budget (4)"]
    assert legend[4].startswith("p99 >= ")

    out = write_step_plot(tmp_path / "steps.png", dists)
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(ValueError, match=r"\.png or \.svg"):
        write_step_plot(tmp_path / "steps.html", dists)


def test_the_cli_writes_the_figure(
    trace_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "steps.png"
    assert main(["report", str(trace_file), "--plot-steps", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    assert "(steps node:fetch, node:answer, node:audit)" in capsys.readouterr().out

    svg = tmp_path / "fetch.svg"
    assert main(["report", str(trace_file), "--plot-steps", str(svg), "--step", "fetch"]) == 0
    assert svg.read_text().lstrip().startswith("<?xml")
    assert "(steps node:fetch)" in capsys.readouterr().out

    assert main(["report", str(trace_file), "--plot-steps", str(out), "--step", "nope"]) == 2
    assert "no finished or cut step 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "fetch"], "--step chooses the steps of --plot-steps"),
        (["--plot-steps", "steps.html"], "--plot-steps needs a .png or .svg file"),
    ],
)
def test_the_cli_refuses_bad_options(
    trace_file: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["report", str(trace_file), *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
