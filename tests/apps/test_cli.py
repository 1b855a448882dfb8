"""The command line as a user first meets it: alone it prints its help, `--version` says which,
and a bad option is a usage error naming it, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import langgraph_deadline
from langgraph_deadline.__main__ import main

SOURCE = str(Path(langgraph_deadline.__file__).resolve().parents[1])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SOURCE, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "langgraph_deadline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_alone_it_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: langgraph-deadline [-h] [--version] {demo,report}")
    assert "demo" in out and "report" in out


def test_version_names_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"langgraph-deadline {langgraph_deadline.__version__}"


@pytest.mark.parametrize("budget", ["-1", "0", "nan", "four", "1e12"])
def test_a_bad_demo_budget_is_a_usage_error_naming_it(budget: str) -> None:
    done = _cli("demo", "--budget", budget)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "langgraph-deadline demo: error: argument --budget: must be a number of seconds more "
        f"than 0 (and at most 100 years), got {budget!r}"
    )
    assert done.stdout == ""  # nothing started


@pytest.mark.skipif(sys.platform == "win32", reason="make")
def test_the_first_make_demo_says_it_is_installing_before_it_does() -> None:
    root = Path(__file__).resolve().parents[2]
    # -n: the commands a first `make demo` runs (-B: as if nothing were installed yet)
    done = subprocess.run(
        ["make", "-n", "-B", "-C", str(root), "demo"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if not line.startswith("make")]
    assert "installing the package and its demo extra" in commands[0]
    assert "about 30 s, once" in commands[0]
    assert commands[1].endswith("-m venv .venv-demo")
