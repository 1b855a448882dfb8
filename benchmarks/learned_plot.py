"""The learned benchmark's figure (matplotlib, imported here only): the share of complete
answers per window of runs for each variant, and the learned caps as the book fills."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["write"]

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def write(
    path: Path,
    shares: Mapping[str, Sequence[tuple[int, float]]],
    learning: Sequence[tuple[int, Mapping[str, float | None]]],
    oracle: Mapping[str, float],
    *,
    round_cap: float,
    window: int,
    runs: int,
) -> Path:
    """`shares`: per variant, (runs done, share complete) per window; `learning`: (runs done,
    the learned cap of each tool then)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 7.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(1.1, 1.0))
    for (label, points), color in zip(shares.items(), COLORS, strict=False):
        edges = [0, *(done for done, _ in points)]
        top.stairs(
            [share * 100 for _, share in points],
            edges,
            baseline=None,
            color=color,
            lw=2,
            label=label,
        )
    top.set_ylabel(f"complete by the deadline,\n% of each {window} runs")
    top.set_title(
        f"Learned budgets: {runs} agent runs, the same draws for each variant", loc="left"
    )
    top.grid(alpha=0.3)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")

    tools = list(oracle)
    for tool, color in zip(tools, COLORS, strict=False):
        xs = [done for done, caps in learning if caps.get(tool) is not None]
        ys = [(caps[tool] or 0.0) * 1000 for _, caps in learning if caps.get(tool) is not None]
        bottom.step(xs, ys, where="post", color=color, label=f"{tool}: learned")
        bottom.axhline(
            oracle[tool] * 1000, color=color, linestyle="--", alpha=0.6, label=f"{tool}: oracle"
        )
    bottom.axhline(
        round_cap * 1000, color="grey", linestyle=":", label=f"round cap ({round_cap:g} s)"
    )
    bottom.set_ylabel("tool cap, ms")
    bottom.set_xlabel("runs done (learned: the book hears only its own runs)")
    bottom.set_title("learned caps as the book fills (the round cap until 20 samples)", loc="left")
    bottom.grid(alpha=0.3)
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    bottom.set_xlim(0, runs)
    fig.savefig(path, format=Path(path).suffix.lstrip(".") or "png", dpi=110)
    return Path(path)
