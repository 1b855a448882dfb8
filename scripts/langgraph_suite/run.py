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
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
WRAPS = {"plain": "", "wrapped": "graph,entrypoint"}


def sdist(version: str, into: Path, package: str = "langgraph") -> Path:
    """The sdist of `package` at `version`, unpacked under `into` (downloaded once)."""
    root = into / f"{package}-{version}"
    if (root / "tests").is_dir():
        return root
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
         ":all:", f"{package}=={version}", "-d", str(into)],
        check=True,
    )  # fmt: skip
    archive = next(into.glob(f"{package.replace('-', '[-_]')}-{version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return root


def _run(root: Path, mode: str, out: Path, targets: list[str], workers: int) -> dict[str, str]:
    env = {"NO_DOCKER": "true", "LGD_SUITE_WRAP": WRAPS[mode]}
    return run_tests(root, mode, out, targets, workers, env=env, plugins=[HERE / "plugin.py"])


def run_tests(
    root: Path,
    mode: str,
    out: Path,
    targets: list[str],
    workers: int,
    *,
    env: dict[str, str],
    plugins: list[Path],
    timeout: float = 1800,
) -> dict[str, str]:
    """Run `targets` of a suite in `mode`, with `env` and the pytest `plugins` (module files;
    this folder's `plugin.py` writes the outcomes); each test's outcome by id ("passed",
    "failed", "skipped").

    A test that hangs (CPython 3.11's threading can deadlock a worker now and then, plain or
    wrapped) is ended by pytest-timeout's thread method, which ends its worker: the test fails
    and xdist starts another worker for the rest."""
    out.unlink(missing_ok=True)
    env = {
        **os.environ,
        **env,
        "LGD_SUITE_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(sorted({str(p.parent) for p in plugins})),
    }
    loads = [arg for p in plugins for arg in ("-p", p.stem)]
    cmd = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider",
           *loads, "-o", "addopts=", "--timeout", "120", "--timeout-method", "thread",
           "-n", str(workers)]  # fmt: skip
    print(
        f"== {mode}: pytest {' '.join(cmd[3:]) if len(targets) < 5 else f'({len(targets)} tests)'}"
    )
    try:
        done = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
        print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    except subprocess.TimeoutExpired:
        print(f"the {mode} run did not end in {timeout:.0f} s: what it wrote by then is read")
    outcomes: dict[str, str] = {}
    for line in out.read_text().splitlines() if out.exists() else ():
        row = json.loads(line)
        if outcomes.get(row["id"]) != "failed":  # a failed setup or teardown fails the test
            outcomes[row["id"]] = row["outcome"]
    return outcomes


def allowlist(path: Path = HERE / "allowlist.txt") -> dict[str, str]:
    """The allowlist's tests, each with its reason."""
    allowed: dict[str, str] = {}
    for line in path.read_text().splitlines():
        test, _, reason = line.partition("#")
        if test.strip():
            allowed[test.strip()] = reason.strip()
    return allowed


def check(
    plain: dict[str, str],
    moded: dict[str, str],
    allowed: dict[str, str],
    again: Callable[[list[str]], dict[str, str]],
    *,
    mode: str = "wrapped",
) -> list[str]:
    """The tests that pass `plain` but not in `mode` (`moded`), allowlist aside, each printed;
    `again` runs the suspects once more, one at a time: a hang or a timing flake is not a
    difference. Prints the counts and the allowlisted tests that pass now."""
    passed = {t for t, o in plain.items() if o == "passed"}
    broken = sorted(t for t in passed if moded.get(t, "missing") != "passed")
    if suspects := [t for t in broken if t not in allowed]:
        rerun = again(suspects)
        flaky = sorted(t for t in broken if rerun.get(t) == "passed")
        for t in flaky:
            print(f"failed {mode}, then passed {mode} when run again alone: {t}")
        broken = [t for t in broken if t not in flaky]
    unexpected = [t for t in broken if t not in allowed]
    stale = sorted(t for t in allowed if t in passed and moded.get(t) == "passed")
    print(
        f"{mode}: {len(plain)} tests, {len(passed)} pass plain, "
        f"{sum(o == 'passed' for o in moded.values())} pass {mode}; "
        f"{len(broken)} pass plain but not {mode} ({len(broken) - len(unexpected)} allowlisted)"
    )
    for t in stale:
        print(f"allowlisted but passes {mode} now (drop it from the allowlist): {t}")
    for t in unexpected:
        print(f"FAILS {mode.upper()}: {t}")
    return unexpected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, default=Path(".suite"), help="where the sdist goes")
    args, extra = parser.parse_known_args()
    version = importlib.metadata.version("langgraph")
    keep = args.keep.resolve()
    root = sdist(version, keep)
    plain = _run(root, "plain", keep / "plain.jsonl", extra or ["tests"], 2)
    wrapped = _run(root, "wrapped", keep / "wrapped.jsonl", extra or ["tests"], 2)
    if not plain or not wrapped:
        print("no test ran")
        return 1
    print(f"langgraph {version}")
    unexpected = check(
        plain,
        wrapped,
        allowlist(),
        lambda suspects: _run(root, "wrapped", keep / "again.jsonl", suspects, 0),
    )
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
