"""Command line: `langgraph-deadline demo` (also `python -m langgraph_deadline demo`)."""

from __future__ import annotations

import argparse
import sys

from ._validate import check_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="langgraph-deadline")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a real multi-hop graph against a slow local service")
    demo.add_argument("--budget", type=float, default=1.5, help="the run's deadline, seconds")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        budget = check_seconds(args.budget, "--budget")
        print(
            f"Same graph (planner -> retrieve from a slow search service -> answer), "
            f"user-facing budget {budget:.1f} s.\nRunning both variants against a loopback "
            "service that takes 6 s...\n",
            flush=True,
        )
        print(run_demo(budget))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
