"""The report's step figure (`--plot-steps`): for each chosen step, its durations on a log time
axis, the finished and the cut (censored) ones apart, with its learned p50/p90/p99, the cap
`learned()` would choose and the cap it ran with.

`step_distributions` works out every number the figure shows (pure, no matplotlib);
`write_step_plot` only draws them (the `plot` extra, imported lazily, on a bare `Figure`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .._core.records import StepRecord
from .._learn.book import KINDS, sample_of
from .._learn.policy import learned
from .._learn.sketch import Estimate
from .learned import HEADROOM, MIN_SAMPLES, QUANTILE, book_of
from .stats import percentile
from .trace import Trace

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["BINS", "TOP", "Mark", "StepDistribution", "step_distributions", "write_step_plot"]

TOP: Final = 4
"""Steps drawn when none is named: those with the most time in the trace."""
BINS: Final = 30
_FLOOR_MS: Final = 0.01  # the log axis starts here at the lowest (a 0 ms step is drawn at it)
QUANTILES: Final = (0.5, 0.9, 0.99)
"""The learned quantiles drawn (as in the report's latency-book table)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Mark:
    """A vertical line of a step's panel: a learned quantile or a cap, in ms."""

    label: str  # "p50", "p90", "p99", "learned cap", "ran with"
    ms: float
    at_least: bool = False  # a quantile among the cut samples: the true value is this or more
    note: str = ""

    def text(self) -> str:
        return f"{self.label} {'>= ' if self.at_least else ''}{_ms(self.ms)} ms{self.note}"


@dataclasses.dataclass(frozen=True, slots=True)
class StepDistribution:
    """One step's panel: its samples as a latency book counts them, binned on a log axis, and
    its marks. Times in ms; `edges` has one more value than each count tuple."""

    kind: str
    name: str
    finished: tuple[float, ...]  # completed steps
    cut: tuple[float, ...]  # censored: timed out, abandoned, or answered stale
    edges: tuple[float, ...]
    finished_counts: tuple[int, ...]
    cut_counts: tuple[int, ...]
    marks: tuple[Mark, ...]
    learned_cap_ms: float | None  # None: fewer than `min_samples` samples (your cap stands)
    ran_with_ms: tuple[float, ...]  # the caps its records ran with (`requested_ms`), sorted
    min_samples: int

    @property
    def count(self) -> int:
        return len(self.finished) + len(self.cut)

    def title(self, quantile: float, headroom: float) -> str:
        cut = f"{len(self.cut)} cut ({len(self.cut) / self.count * 100:.0f}%)"
        if self.learned_cap_ms is None:
            cap = f"no learned cap below {self.min_samples} samples"
        else:
            cap = f"learned cap p{quantile * 100:g} x {headroom:g}"
        return f"{self.name} ({self.kind}): {self.count} samples, {cut}; {cap}"


def step_distributions(
    trace: Trace,
    *,
    steps: Sequence[str] = (),
    top: int = TOP,
    quantile: float = QUANTILE,
    headroom: float = HEADROOM,
    min_samples: int = MIN_SAMPLES,
    bins: int = BINS,
) -> list[StepDistribution]:
    """The panels of `steps` (each a name, every kind under it, or `kind:name`), or of the `top`
    steps with the most time in the trace; learned numbers as `format_learned` has them.

    Raises:
        LookupError: a step in `steps` with no finished or cut record in the trace.
    """
    book = book_of(trace)
    rule = learned(book, quantile=quantile, headroom=headroom, min_samples=min_samples)
    records: dict[tuple[str, str], list[StepRecord]] = {}
    for record in (*(r for run in trace.runs for r in run.steps), *trace.loose):
        records.setdefault((record.kind, record.name), []).append(record)
    samples = {key: [s for r in recs if (s := sample_of(r))] for key, recs in records.items()}
    keys = [key for key, got in samples.items() if got]
    if steps:
        chosen = [key for spec in steps for key in _matching(spec, keys)]
        chosen = list(dict.fromkeys(chosen))
    else:
        spent = {key: sum(s for s, _ in samples[key]) for key in keys}
        chosen = sorted(keys, key=lambda k: (-spent[k], k))[:top]
    out = []
    for kind, name in chosen:
        finished = tuple(sorted(s * 1000.0 for s, cut in samples[(kind, name)] if not cut))
        cut = tuple(sorted(s * 1000.0 for s, was_cut in samples[(kind, name)] if was_cut))
        edges = _edges([*finished, *cut], bins)
        sketch = book.sketch(name, kind)
        marks = [_mark(f"p{q * 100:g}", sketch.quantile(q)) for q in QUANTILES]
        cap = rule.cap(kind, name)
        learned_ms = None if cap is None else cap * 1000.0
        if learned_ms is not None:
            marks.append(Mark("learned cap", learned_ms))
        ran = tuple(sorted(ms for r in records[(kind, name)] if (ms := r.requested_ms)))
        if ran:
            spread = f" (median; {_ms(ran[0])} to {_ms(ran[-1])} ms)" if ran[0] != ran[-1] else ""
            marks.append(Mark("ran with", percentile(ran, 50), note=spread))
        out.append(
            StepDistribution(
                kind=kind,
                name=name,
                finished=finished,
                cut=cut,
                edges=edges,
                finished_counts=_counts(finished, edges),
                cut_counts=_counts(cut, edges),
                marks=tuple(marks),
                learned_cap_ms=learned_ms,
                ran_with_ms=ran,
                min_samples=min_samples,
            )
        )
    return out


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _matching(spec: str, keys: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    kind, sep, rest = spec.partition(":")
    found: list[tuple[str, str]]
    if sep and kind in KINDS:
        found = [k for k in keys if k == (kind, rest)]
    else:
        found = sorted(k for k in keys if k[1] == spec)
    if not found:
        known = ", ".join(f"{k}:{n}" for k, n in sorted(keys)) or "none"
        raise LookupError(f"no finished or cut step {spec!r} in the trace (steps: {known})")
    return found


def _mark(label: str, estimate: Estimate | None) -> Mark:
    assert estimate is not None  # a step is chosen only with samples
    return Mark(label, estimate.seconds * 1000.0, estimate.at_least)


def _edges(values: Sequence[float], bins: int) -> tuple[float, ...]:
    """`bins` + 1 bin edges, evenly spaced on a log axis, around every value."""
    lo = max(min(values), _FLOOR_MS)
    hi = max(max(values), lo)
    if hi <= lo * 1.01:
        lo, hi = lo / 1.25, hi * 1.25
    step = math.log(hi / lo) / bins
    return (lo, *(lo * math.exp(step * i) for i in range(1, bins)), hi)


def _counts(values: Sequence[float], edges: Sequence[float]) -> tuple[int, ...]:
    """How many values fall in each bin (below the first edge: the first bin; the last bin
    holds its upper edge)."""
    counts = [0] * (len(edges) - 1)
    for v in values:
        i = bisect.bisect_right(edges, v) - 1
        counts[min(max(i, 0), len(counts) - 1)] += 1
    return tuple(counts)


# -- drawing -------------------------------------------------------------------------------------

FORMATS: Final = (".png", ".svg")
FINISHED_COLOR: Final = "#4c9a5b"
CUT_COLOR: Final = "#d1493f"
MARK_STYLES: Final = {
    "p50": {"color": "#555555", "linestyle": ":"},
    "p90": {"color": "#555555", "linestyle": "-."},
    "p99": {"color": "#555555", "linestyle": "--"},
    "learned cap": {"color": "#1f5fbf", "linestyle": "-", "linewidth": 2.0},
    "ran with": {"color": "black", "linestyle": "-", "linewidth": 1.2, "alpha": 0.7},
}


def write_step_plot(
    path: str | os.PathLike[str],
    dists: Sequence[StepDistribution],
    *,
    quantile: float = QUANTILE,
    headroom: float = HEADROOM,
) -> Path:
    """Draw one panel per step of `dists` into `path` (.png or .svg).

    Raises:
        ValueError: another extension, or no step to draw.
        ImportError: matplotlib is not installed (`pip install 'langgraph-deadline[plot]'`).
    """
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--plot-steps needs a .png or .svg file, got {out.name!r}")
    if not dists:
        raise ValueError("no step to draw")
    import matplotlib

    fig = _figure(dists, quantile, headroom)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "langgraph-deadline"}):
        fig.savefig(out, format=suffix[1:], dpi=120)
    return out


def _figure(dists: Sequence[StepDistribution], quantile: float, headroom: float) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 0.6 + 2.7 * len(dists)), layout="constrained")
    axes = fig.subplots(len(dists), 1, squeeze=False)[:, 0]
    for ax, dist in zip(axes, dists, strict=True):
        _panel(ax, dist, dist.title(quantile, headroom))
    return fig


def _panel(ax: Axes, dist: StepDistribution, title: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    left = dist.edges[:-1]
    widths = [b - a for a, b in itertools.pairwise(dist.edges)]
    finished = ax.bar(
        left,
        dist.finished_counts,
        width=widths,
        align="edge",
        color=FINISHED_COLOR,
        label=f"finished ({len(dist.finished)})",
    )
    cut = ax.bar(
        left,
        dist.cut_counts,
        width=widths,
        align="edge",
        bottom=dist.finished_counts,
        color=CUT_COLOR,
        hatch="//",
        edgecolor="white",
        label=f"cut at its budget ({len(dist.cut)})",
    )
    lines = [
        ax.axvline(mark.ms, label=mark.text(), **MARK_STYLES[mark.label])  # type: ignore[arg-type]
        for mark in dist.marks
    ]
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    xs = [*dist.edges, *(m.ms for m in dist.marks)]
    ax.set_xlim(min(xs) / 1.1, max(xs) * 1.1)
    ax.set_xlabel("ms (log scale)")
    ax.set_ylabel("steps")
    ax.set_title(title, loc="left", fontsize="medium")
    ax.grid(axis="x", which="both", alpha=0.25)
    ax.legend(
        handles=[finished, cut, *lines],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
    )
