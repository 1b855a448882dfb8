"""Without an extra, what needs it says which extra to install, instead of a bare
`ModuleNotFoundError`. Checked in a subprocess where the optional packages cannot be imported
(a `sys.meta_path` finder refuses them), as after `pip install langgraph-deadline`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from langgraph_deadline._core.extras import needs_extra

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = (
    "langchain",
    "langchain_openai",
    "opentelemetry",
    "matplotlib",
    "starlette",
    "uvicorn",
    "prometheus_client",
    "langchain_mcp_adapters",
    "mcp",
    "temporalio",
)

SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, sys

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    found = {}

    def attempt(case, code):
        try:
            exec(code, {})
            found[case] = "no error"
        except Exception as exc:
            found[case] = f"{type(exc).__name__}: {exc}"

    attempt("core", "import langgraph_deadline, langgraph_deadline.http, "
            "langgraph_deadline.asgi, langgraph_deadline.instrument, langgraph_deadline.mcp, "
            "langgraph_deadline.types, langgraph_deadline.learn")
    attempt("agents", "import langgraph_deadline.agents")
    attempt("temporal", "import langgraph_deadline.temporal")
    attempt("otel", "from langgraph_deadline.instrument import OtelObserver; OtelObserver()")
    attempt("prometheus", "from langgraph_deadline.instrument import PrometheusObserver\\n"
            "PrometheusObserver()")
    attempt("otel_book", "from langgraph_deadline.learn import LatencyBook\\n"
            "from langgraph_deadline.instrument import OtelBookGauges\\n"
            "OtelBookGauges(LatencyBook(listen=False))")
    attempt("prometheus_book", "from langgraph_deadline.learn import LatencyBook\\n"
            "from langgraph_deadline.instrument import PrometheusBookCollector\\n"
            "PrometheusBookCollector(LatencyBook(listen=False))")
    attempt("asgi", "from langgraph_deadline.testing import FakeOpenAIServer\\n"
            "FakeOpenAIServer().start()")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            from langgraph_deadline.__main__ import main
            code = main(["demo"])
        found["demo"] = f"exit {code}: {err.getvalue()}"
    except Exception as exc:
        found["demo"] = f"raised {type(exc).__name__}: {exc}"
    print(json.dumps(found))
    """
)


@pytest.fixture(scope="module")
def without_extras() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", f"BLOCKED = {OPTIONAL!r}\n{SCRIPT}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_the_core_and_the_http_asgi_and_instrument_modules_import_without_any_extra(
    without_extras: dict[str, str],
) -> None:
    assert without_extras["core"] == "no error"


@pytest.mark.parametrize(
    ("case", "extra", "message"),
    [
        ("agents", "agents", "langgraph_deadline.agents needs langchain"),
        ("temporal", "temporal", "langgraph_deadline.temporal needs temporalio"),
        ("otel", "otel", "OtelObserver needs opentelemetry"),
        ("otel_book", "otel", "OtelBookGauges needs opentelemetry"),
        ("prometheus", "prometheus", "PrometheusObserver needs prometheus_client"),
        ("prometheus_book", "prometheus", "PrometheusBookCollector needs prometheus_client"),
        ("asgi", "asgi", "FakeOpenAIServer needs starlette"),
    ],
)
def test_a_missing_extra_is_named_with_its_install_command(
    without_extras: dict[str, str], case: str, extra: str, message: str
) -> None:
    assert without_extras[case] == (
        f"ModuleNotFoundError: {message}, which is not installed: "
        f"pip install 'langgraph-deadline[{extra}]'"
    )


def test_the_demo_without_its_extra_exits_2_naming_it_without_a_traceback(
    without_extras: dict[str, str],
) -> None:
    assert without_extras["demo"] == (
        "exit 2: langgraph-deadline demo needs langchain_openai, which is not installed: "
        "pip install 'langgraph-deadline[demo]'\n"
    )


def test_a_missing_module_of_this_library_is_a_bug_and_is_not_blamed_on_an_extra() -> None:
    refused = pytest.raises(ModuleNotFoundError, match="No module named")
    with refused as caught, needs_extra("otel", "OtelObserver"):
        __import__("langgraph_deadline._no_such_module")
    assert "pip install" not in str(caught.value)


def test_needs_extra_keeps_the_missing_modules_name_and_cause() -> None:
    with pytest.raises(ModuleNotFoundError) as caught, needs_extra("plot", "the waterfall"):
        __import__("no_such_package_for_this_test.sub")
    error: Any = caught.value
    assert error.name == "no_such_package_for_this_test"  # the first part that is missing
    assert str(error) == (
        "the waterfall needs no_such_package_for_this_test, which is not installed: "
        "pip install 'langgraph-deadline[plot]'"
    )
    assert isinstance(error.__cause__, ModuleNotFoundError)
