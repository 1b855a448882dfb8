"""The overshoot benchmark's figure (matplotlib, imported here only): how late runs return
after their deadline against how many reach it at once, p50 and p99 per variant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["write"]

COLORS = ("#7f7f7f", "#1f77b4", "#2ca02c", "#ff7f0e")


def write(
    path: Path,
    points: Mapping[str, Sequence[tuple[int, float, float]]],
    *,
    deadline: float,
    nodes: int,
) -> Path:
    """`points`: per variant, (concurrent runs, p50 ms, p99 ms) at each concurrency."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 5.0), layout="constrained")
    ax = fig.subplots()
    for (label, rows), color in zip(points.items(), COLORS, strict=False):
        runs = [n for n, _, _ in rows]
        ax.plot(runs, [p50 for _, p50, _ in rows], "o-", color=color, label=f"{label}: p50")
        ax.plot(runs, [p99 for _, _, p99 in rows], "s--", color=color, label=f"{label}: p99")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(sorted({n for rows in points.values() for n, _, _ in rows}))
    ax.get_xaxis().set_major_formatter("{x:,.0f}")
    ax.set_xlabel("runs reaching their deadline together (one event loop)")
    ax.set_ylabel("return time - deadline, ms")
    ax.set_title(
        f"Overshoot: {nodes} hanging nodes, {deadline:g} s deadline, all runs started at once",
        loc="left",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=110)
    return path
