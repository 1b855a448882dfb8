"""LangChain's own agent tests, run plain and then with `DeadlineMiddleware` in every
`create_agent`: listed first, listed last, and listed first with the agent wrapped by
`with_deadlines`; and with the agent wrapped by `with_deadlines` alone (`graph`).

A deadline nobody reaches must change nothing: a test that passes plain and fails in a mode is
a break of the drop-in promise, unless `allowlist.txt` names it (`MODE test  # reason`, or `*`
for every mode with the middleware). Downloads the sdist of the `langchain` installed here
(PyPI ships its `tests/`), runs `tests/unit_tests/agents` on two workers in each mode, prints
the counts and exits 1 on any unexpected difference.

    python scripts/agents_suite/run.py [--keep DIR] [--modes first,last] [pytest args]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "langgraph_suite"))

from run import allowlist, check, run_tests, sdist  # noqa: E402

MODES = ("first", "last", "wrapped", "graph")
WITH_MIDDLEWARE = ("first", "last", "wrapped")
PLUGINS = [HERE.parent / "langgraph_suite" / "plugin.py", HERE / "agents_plugin.py"]


def _allowed(mode: str) -> dict[str, str]:
    """The allowlisted tests of `mode` (lines `MODE test  # reason`; `*` is every mode with the
    middleware)."""
    allowed: dict[str, str] = {}
    for entry, reason in allowlist(HERE / "allowlist.txt").items():
        which, _, test = entry.partition(" ")
        if which == mode or (which == "*" and mode in WITH_MIDDLEWARE):
            allowed[test.strip()] = reason
    return allowed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=Path(".suite"), help="where the sdist goes")
    parser.add_argument("--modes", default=",".join(MODES), help="which modes to run")
    args, extra = parser.parse_known_args()
    version = importlib.metadata.version("langchain")
    keep = args.keep.resolve()
    root = sdist(version, keep, "langchain")
    targets = extra or ["tests/unit_tests/agents"]

    def run(mode: str, out: str, tests: list[str], workers: int) -> dict[str, str]:
        env = {"LGD_AGENTS_MODE": mode}
        return run_tests(root, mode, keep / out, tests, workers, env=env, plugins=PLUGINS)

    plain = run("plain", "agents-plain.jsonl", targets, 2)
    if not plain:
        print("no test ran")
        return 1
    print(f"langchain {version}")
    unexpected = 0
    for mode in args.modes.split(","):
        moded = run(mode, f"agents-{mode}.jsonl", targets, 2)
        if not moded:
            print(f"no test ran in mode {mode}")
            return 1
        again = f"agents-{mode}-again.jsonl"
        unexpected += len(
            check(
                plain,
                moded,
                _allowed(mode),
                lambda suspects, mode=mode, again=again: run(mode, again, suspects, 0),  # type: ignore[misc]
                mode=mode,
            )
        )
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
