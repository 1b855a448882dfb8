"""The long-runs benchmark's figure (matplotlib, imported here only): the bytes a thread's
checkpoints hold and the time per step of the last steps, against the run's length."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["write"]

COLORS = {"bare": "#1f77b4", "bare + fields": "#2ca02c", "wrapped": "#d62728"}
STYLES = {"memory": "-", "sqlite": "--"}


def write(
    path: Path,
    points: Mapping[tuple[str, str], Sequence[tuple[int, float, float]]],
    *,
    edge: int,
) -> Path:
    """`points`: per (saver, variant), (steps, MB stored, ms per step of the last `edge`)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 7.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    for (saver, variant), rows in points.items():
        steps = [n for n, _, _ in rows]
        style = {"color": COLORS.get(variant), "linestyle": STYLES.get(saver), "marker": "o"}
        top.plot(steps, [mb for _, mb, _ in rows], label=f"{variant}, {saver}", **style)
        bottom.plot(steps, [ms for _, _, ms in rows], label=f"{variant}, {saver}", **style)
    top.set_yscale("log")
    top.set_ylabel("checkpoints stored, MB")
    top.set_title("Long runs: one thread, N steps of a loop graph, side by side", loc="left")
    bottom.set_ylabel(f"ms per step,\nlast {edge} steps")
    bottom.set_xlabel("steps in the run (N)")
    bottom.set_xscale("log")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.savefig(path, format=Path(path).suffix.lstrip(".") or "png", dpi=110)
    return Path(path)
