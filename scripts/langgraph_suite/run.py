"""LangGraph's own test suite, run plain and then with every graph wrapped by `with_deadlines`.

A deadline nobody reaches must change nothing: a test that passes plain and fails wrapped is a
break of the drop-in promise, unless `allowlist.txt` names it with the reason it differs on
purpose. Downloads the sdist of the `langgraph` installed here (PyPI ships its `tests/`), runs
its in-memory part (`NO_DOCKER=true`: no PostgreSQL, no Redis) on two workers, prints the counts
and exits 1 on any unexpected difference.

    python scripts/langgraph_suite/run.py [--keep DIR] [pytest args, e.g. -k pydantic]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WRAPS = {"plain": "", "wrapped": "graph,entrypoint"}


def _sdist(version: str, into: Path) -> Path:
    """LangGraph's sdist for `version`, unpacked under `into` (downloaded once)."""
    root = into / f"langgraph-{version}"
    if (root / "tests").is_dir():
        return root
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
         ":all:", f"langgraph=={version}", "-d", str(into)],
        check=True,
    )  # fmt: skip
    with tarfile.open(into / f"langgraph-{version}.tar.gz") as tar:
        tar.extractall(into, filter="data")
    return root


def _run(root: Path, mode: str, out: Path, targets: list[str], workers: int) -> dict[str, str]:
    """Run `targets` of the suite in `mode`; each test's outcome by id ("passed", "failed",
    "skipped").

    A test that hangs (CPython 3.11's threading can deadlock a worker now and then, plain or
    wrapped) is ended by pytest-timeout's thread method, which ends its worker: the test fails
    and xdist starts another worker for the rest."""
    out.unlink(missing_ok=True)
    env = {
        **os.environ,
        "NO_DOCKER": "true",
        "LGD_SUITE_WRAP": WRAPS[mode],
        "LGD_SUITE_OUT": str(out),
        "PYTHONPATH": str(HERE),
    }
    cmd = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider",
           "-p", "plugin", "-o", "addopts=", "--timeout", "120", "--timeout-method", "thread",
           "-n", str(workers)]  # fmt: skip
    print(
        f"== {mode}: pytest {' '.join(cmd[3:]) if len(targets) < 5 else f'({len(targets)} tests)'}"
    )
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1800)
        print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    except subprocess.TimeoutExpired:
        print(f"the {mode} run did not end in 30 minutes: what it wrote by then is read")
    outcomes: dict[str, str] = {}
    for line in out.read_text().splitlines() if out.exists() else ():
        row = json.loads(line)
        if outcomes.get(row["id"]) != "failed":  # a failed setup or teardown fails the test
            outcomes[row["id"]] = row["outcome"]
    return outcomes


def _allowlist() -> dict[str, str]:
    allowed: dict[str, str] = {}
    for line in (HERE / "allowlist.txt").read_text().splitlines():
        test, _, reason = line.partition("#")
        if test.strip():
            allowed[test.strip()] = reason.strip()
    return allowed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=Path(".suite"), help="where the sdist goes")
    args, extra = parser.parse_known_args()
    version = importlib.metadata.version("langgraph")
    root = _sdist(version, args.keep.resolve())
    keep = args.keep.resolve()
    plain = _run(root, "plain", keep / "plain.jsonl", extra or ["tests"], 2)
    wrapped = _run(root, "wrapped", keep / "wrapped.jsonl", extra or ["tests"], 2)
    if not plain or not wrapped:
        print("no test ran")
        return 1
    passed = {t for t, o in plain.items() if o == "passed"}
    broken = sorted(t for t in passed if wrapped.get(t, "missing") != "passed")
    allowed = _allowlist()
    if suspects := [t for t in broken if t not in allowed]:
        # Once more, one at a time: a hang or a timing flake is not a difference.
        again = _run(root, "wrapped", keep / "again.jsonl", suspects, 0)
        flaky = sorted(t for t in broken if again.get(t) == "passed")
        for t in flaky:
            print(f"failed wrapped, then passed wrapped when run again alone: {t}")
        broken = [t for t in broken if t not in flaky]
    unexpected = [t for t in broken if t not in allowed]
    stale = sorted(t for t in allowed if t in passed and wrapped.get(t) == "passed")
    print(
        f"langgraph {version}: {len(plain)} tests, {len(passed)} pass plain, "
        f"{sum(o == 'passed' for o in wrapped.values())} pass wrapped; "
        f"{len(broken)} pass plain but not wrapped ({len(broken) - len(unexpected)} allowlisted)"
    )
    for t in stale:
        print(f"allowlisted but passes wrapped now (drop it from allowlist.txt): {t}")
    for t in unexpected:
        print(f"FAILS WRAPPED: {t}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
