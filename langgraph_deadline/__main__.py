"""Command line: `langgraph-deadline demo` and `langgraph-deadline report TRACE.jsonl`
(also `python -m langgraph_deadline ...`)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._core.extras import install_hint, require_extra
from ._core.validate import MAX_SECONDS

if TYPE_CHECKING:
    from ._report.trace import Trace

DEMO_NEEDS = ("langchain_openai", "starlette", "uvicorn")
"""What `demo` imports from the `demo` extra (matplotlib too, but without it the demo only
skips its waterfall)."""
STEPS_DRAWN = 4
"""`report --plot-steps` without `--step`: the steps with the most time in the trace."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line (`argv` defaults to `sys.argv[1:]`); return the exit status. With
    no command it prints its help."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="langgraph-deadline",
        description="One deadline for a whole LangGraph run: see it at work (demo), or read "
        "where the budget went in recorded traces (report).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{demo,report}")
    demo = sub.add_parser(
        "demo",
        help="a real multi-hop agent against local servers: naive timeouts vs one deadline "
        "(plain, with hedged lookups, with learned caps)",
    )
    demo.add_argument(
        "--budget", type=_budget, default=4.0, help="the run's deadline, seconds (default 4)"
    )
    demo.add_argument(
        "--base-url",
        help="a real OpenAI-compatible endpoint (default: a local streaming server)",
    )
    demo.add_argument("--api-key", default="not-needed", help="API key for --base-url")
    demo.add_argument("--model", default="fake-model", help="model name for --base-url")
    demo.add_argument(
        "--plot",
        default="langgraph-deadline-demo.png",
        help="where to write the deadline run's waterfall (.png/.svg/.html; '' for none)",
    )
    report = sub.add_parser(
        "report",
        help="where the budget went: per-step latency, deadline-exceeded rates, suggested caps",
        description="Summarise JSON-lines traces written by JsonlTraceWriter.",
    )
    report.add_argument("trace", nargs="+", help="JSON-lines trace file(s)")
    report.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw a run's waterfall and the per-step distributions (.png, .svg or .html; "
        "needs the 'plot' extra)",
    )
    report.add_argument(
        "--run",
        metavar="RUN_ID",
        help="the run to draw (an id or a unique prefix; default: the run that used the most "
        "of its budget)",
    )
    report.add_argument(
        "--plot-steps",
        metavar="FILE",
        help="also draw each step's durations (finished and cut) on a log axis with its learned "
        "p50/p90/p99, the cap learned() would choose and the cap it ran with (.png or .svg; "
        "needs the 'plot' extra)",
    )
    report.add_argument(
        "--step",
        metavar="NAME",
        action="append",
        help="a step to draw in --plot-steps, NAME or KIND:NAME (tool:search); repeat for more "
        f"(default: the {STEPS_DRAWN} steps with the most time in the trace)",
    )
    report.add_argument(
        "--headroom",
        type=float,
        default=1.2,
        help="recommended cap = p99 of healthy runs x this (default 1.2)",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "report":
        return _report(parser, args)
    parser.print_help()
    return 0


def _budget(text: str) -> float:
    """`--budget`: seconds, more than 0 (argparse turns the error into a usage message that
    names the option)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.0 < seconds <= MAX_SECONDS:  # NaN included
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds more than 0 (and at most 100 years), got {text!r}"
        )
    return seconds


def _demo(args: argparse.Namespace) -> int:
    try:
        require_extra("demo", "langgraph-deadline demo", *DEMO_NEEDS)
    except ModuleNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    from ._apps.demo import DemoOptions, run_demo

    budget: float = args.budget
    opts = DemoOptions(
        budget=budget,
        base_url=args.base_url,
        api_key=args.api_key,
        model=args.model,
        plot=args.plot or None,
    )
    where = args.base_url or "a local OpenAI-compatible streaming server"
    print(
        f"One agent: planner -> 3 lookups in parallel (one service hangs) -> streaming writer.\n"
        f"User-facing budget {budget:.1f} s; model: {where}.\n"
        "Run 1 uses the usual per-step timeouts, run 2 one deadline for the whole run, run 3\n"
        "the same with hedged lookups, run 4 with a latency book attached (what the runs before\n"
        "it took): it keeps the writer's time back and sizes its answer to the time left.\n",
        flush=True,
    )
    print(run_demo(opts))
    return 0


def _report(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ._report.learned import format_learned
    from ._report.report import format_report
    from ._report.stats import step_stats
    from ._report.trace import read_trace

    if not (args.headroom >= 1.0 and args.headroom < float("inf")):
        parser.error(f"--headroom must be a finite number >= 1, got {args.headroom}")
    if args.plot is not None and not args.plot.lower().endswith((".png", ".svg", ".html")):
        parser.error(f"--plot needs a .png, .svg or .html file, got {args.plot!r}")
    if args.plot_steps is not None and not args.plot_steps.lower().endswith((".png", ".svg")):
        parser.error(f"--plot-steps needs a .png or .svg file, got {args.plot_steps!r}")
    if args.step and args.plot_steps is None:
        parser.error("--step chooses the steps of --plot-steps: give --plot-steps FILE too")
    try:
        trace = read_trace(args.trace)
    except OSError as exc:
        print(
            f"langgraph-deadline report: cannot read {exc.filename}: {exc.strerror}",
            file=sys.stderr,
        )
        return 2
    if not trace.runs and not trace.loose:
        print(
            f"langgraph-deadline report: no step or run events in {', '.join(args.trace)}",
            file=sys.stderr,
        )
        return 1
    stats = step_stats(trace, headroom=args.headroom)
    text = format_report(trace, stats, headroom=args.headroom)
    print(text)
    print()
    print(format_learned(trace))
    if args.plot is not None and not trace.runs:
        print(
            f"\nlanggraph-deadline report: --plot draws one run, and this trace has none: its "
            f"{len(trace.loose)} step records ran outside any run (under deadline_scope, not in "
            "a with_deadlines graph or an agent under DeadlineMiddleware). Nothing was drawn; "
            "the table above is the report, and --plot-steps draws its steps.",
            file=sys.stderr,
        )
        return 1
    if args.plot is not None:
        try:
            run = trace.run(args.run)
        except LookupError as exc:
            print(f"langgraph-deadline report: {exc}", file=sys.stderr)
            return 2
        try:
            from ._report.plot import write_plot

            written = write_plot(args.plot, trace, stats, run, report_text=text)
        except ImportError:
            return _no_matplotlib("--plot")
        print(f"\nwrote {written} (run {run.run_id})")
    if args.plot_steps is not None:
        return _plot_steps(args.plot_steps, trace, args.step or ())
    return 0


def _plot_steps(path: str, trace: Trace, steps: Sequence[str]) -> int:
    from ._report.step_plot import step_distributions

    try:
        dists = step_distributions(trace, steps=steps, top=STEPS_DRAWN)
    except LookupError as exc:
        print(f"langgraph-deadline report: {exc}", file=sys.stderr)
        return 2
    if not dists:
        print("langgraph-deadline report: no finished or cut step to draw", file=sys.stderr)
        return 1
    try:
        from ._report.step_plot import write_step_plot

        written = write_step_plot(path, dists)
    except ImportError:
        return _no_matplotlib("--plot-steps")
    shown = ", ".join(f"{d.kind}:{d.name}" for d in dists)
    print(f"\nwrote {written} (steps {shown})")
    return 0


def _no_matplotlib(option: str) -> int:
    print(
        f"langgraph-deadline report: {option} needs matplotlib: {install_hint('plot')}",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
