"""`python -m benchmarks [--quick] [--only NAME] [--markdown] [--check] [--plots DIR]`: run the
benchmarks."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import (
    agent_book,
    agents,
    fallback,
    hedge,
    http_overhead,
    learned,
    load,
    long,
    overhead,
    overshoot,
    providers,
    stall,
    temporal,
    tools,
)
from ._common import Section, machine

BENCHMARKS: dict[str, Callable[..., Section]] = {
    "overhead": overhead.run,
    "overshoot": overshoot.run,
    "tools": tools.run,
    "http": http_overhead.run,
    "agents": agents.run,
    "agent_book": agent_book.run,
    "load": load.run,
    "learned": learned.run,
    "fallback": fallback.run,
    "hedge": hedge.run,
    "providers": providers.run,
    "stall": stall.run,
    "long": long.run,
    "temporal": temporal.run,
}
DRAWN = frozenset({"learned", "long", "overshoot"})
"""The benchmarks that draw a figure (`--plots DIR`: DIR/benchmarks-NAME.png)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer samples (all of them: about 11 minutes on 2 cores)",
    )
    parser.add_argument(
        "--only", choices=sorted(BENCHMARKS), action="append", help="run only this benchmark"
    )
    parser.add_argument("--markdown", action="store_true", help="print tables as Markdown")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--plots",
        metavar="DIR",
        type=Path,
        help="also write the figures of the benchmarks that draw one "
        f"({', '.join(sorted(DRAWN))}) as DIR/benchmarks-NAME.png (needs matplotlib)",
    )
    args = parser.parse_args(argv)

    names = args.only or list(BENCHMARKS)
    mode = "quick" if args.quick else "full"
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    print(f"langgraph-deadline benchmarks ({mode}), {now}")
    print(machine())
    print()

    started = time.perf_counter()
    sections: list[Section] = []
    for name in names:
        extra = {}
        if args.plots is not None and name in DRAWN:
            args.plots.mkdir(parents=True, exist_ok=True)
            extra["plot"] = args.plots / f"benchmarks-{name}.png"
        section = BENCHMARKS[name](quick=args.quick, **extra)
        sections.append(section)
        for table in section.tables:
            print(table.markdown() if args.markdown else table.text())
            print()
        sys.stdout.flush()

    print("Summary")
    print("-------")
    for section in sections:
        for label, value in section.figures:
            print(f"{label}: {value}")
    checks = [c for s in sections for c in s.checks]
    for check in checks:
        print(check.render())
    print(f"total {time.perf_counter() - started:.1f} s")
    return 1 if args.check and not all(c.ok for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
