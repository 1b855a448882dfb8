from __future__ import annotations

import pytest

import langgraph_deadline
import langgraph_deadline.testing

PUBLIC_MODULES = (
    "langgraph_deadline",
    "langgraph_deadline.types",
    "langgraph_deadline.learn",
    "langgraph_deadline.agents",
    "langgraph_deadline.asgi",
    "langgraph_deadline.http",
    "langgraph_deadline.instrument",
    "langgraph_deadline.mcp",
    "langgraph_deadline.temporal",
    "langgraph_deadline.tenacity",
    "langgraph_deadline.testing",
)

DOCUMENTED = {
    "BudgetedModel",
    "Closing",
    "budgeted_model",
    "Deadline",
    "DeadlineExceeded",
    "DeadlineState",
    "DeadlineModel",
    "DeadlineDataclass",
    "InMemoryStaleCache",
    "StaleCache",
    "StoreStaleCache",
    "Hedge",
    "Retries",
    "deadline_tool",
    "deadline_tools",
    "timeout_message",
    "Outcome",
    "StepRecord",
    "Terminal",
    "budgeted",
    "check",
    "client_timeout",
    "current_deadline",
    "deadline_input",
    "deadline_scope",
    "earliest",
    "remaining",
    "retry",
    "terminal_of",
    "with_deadlines",
}


def test_all_is_the_documented_surface() -> None:
    assert set(langgraph_deadline.__all__) == DOCUMENTED
    for name in DOCUMENTED:
        assert hasattr(langgraph_deadline, name), name


def test_the_root_holds_at_most_30_names() -> None:
    assert len(langgraph_deadline.__all__) <= 30, sorted(langgraph_deadline.__all__)


def test_types_and_learn_module_surfaces() -> None:
    import langgraph_deadline.learn as learn
    import langgraph_deadline.types as types

    assert set(types.__all__) == {
        "CachedResult",
        "CompileArgs",
        "DeadlineEntrypoint",
        "DeadlineGraph",
        "DeadlineTool",
        "ScopeFrame",
        "StepStatus",
        "ToolArgs",
        "ToolTimeout",
    }
    assert set(learn.__all__) == {"Estimate", "LatencyBook", "LatencySketch", "Learned", "learned"}
    for module in (types, learn):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_no_name_is_exported_from_two_public_modules() -> None:
    import importlib

    homes: dict[str, list[str]] = {}
    for module in PUBLIC_MODULES:
        for name in importlib.import_module(module).__all__:
            homes.setdefault(name, []).append(module)
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("langgraph_deadline", "langgraph_deadline.testing", "ManualClock"),
        ("langgraph_deadline", "langgraph_deadline.testing", "Clock"),
        ("langgraph_deadline", "langgraph_deadline.testing", "SystemClock"),
        ("langgraph_deadline", "langgraph_deadline.learn", "LatencyBook"),
        ("langgraph_deadline", "langgraph_deadline.learn", "LatencySketch"),
        ("langgraph_deadline", "langgraph_deadline.learn", "Estimate"),
        ("langgraph_deadline", "langgraph_deadline.learn", "Learned"),
        ("langgraph_deadline", "langgraph_deadline.learn", "learned"),
        ("langgraph_deadline", "langgraph_deadline.types", "DeadlineGraph"),
        ("langgraph_deadline", "langgraph_deadline.types", "DeadlineEntrypoint"),
        ("langgraph_deadline", "langgraph_deadline.types", "DeadlineTool"),
        ("langgraph_deadline", "langgraph_deadline.types", "ScopeFrame"),
        ("langgraph_deadline", "langgraph_deadline.types", "StepStatus"),
        ("langgraph_deadline", "langgraph_deadline.types", "ToolTimeout"),
        ("langgraph_deadline.agents", "langgraph_deadline", "budgeted_model"),
        ("langgraph_deadline.agents", "langgraph_deadline", "BudgetedModel"),
        ("langgraph_deadline", "langgraph_deadline.tenacity", "stop_at_deadline"),
        ("langgraph_deadline", "langgraph_deadline.tenacity", "wait_within_deadline"),
    ],
)
def test_an_old_import_path_is_gone_before_the_first_release(old: str, new: str, name: str) -> None:
    """Nothing is released yet, so a name that moved has no alias at its old path (#49)."""
    import importlib

    with pytest.raises(AttributeError, match=f"has no attribute {name!r}"):
        getattr(importlib.import_module(old), name)
    assert getattr(importlib.import_module(new), name) is not None


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'ManualClok'"):
        _ = langgraph_deadline.ManualClok  # type: ignore[attr-defined]


def test_testing_kit_surface() -> None:
    assert set(langgraph_deadline.testing.__all__) == {
        "ChatReply",
        "Clock",
        "FakeAnthropicServer",
        "FakeBedrockServer",
        "FakeGeminiServer",
        "FakeOllamaServer",
        "FakeOpenAIServer",
        "ManualClock",
        "RecordingServer",
        "ScriptedToolCall",
        "ServedChatRequest",
        "ServedRequest",
        "SlowServer",
        "SystemClock",
        "TemporalDevServer",
        "assert_nothing_sent_after",
        "await_nothing_sent_after",
    }
    for name in langgraph_deadline.testing.__all__:
        assert getattr(langgraph_deadline.testing, name) is not None


def test_deadline_exceeded_is_a_timeout_error_langgraph_does_not_retry() -> None:
    from langgraph._internal._retry import default_retry_on

    err = langgraph_deadline.DeadlineExceeded("x")
    assert isinstance(err, TimeoutError)
    assert not default_retry_on(err)
    assert err.outcome.terminal is langgraph_deadline.Terminal.DEADLINE_EXCEEDED


def test_instrument_module_surface() -> None:
    import langgraph_deadline.instrument as instrument

    assert set(instrument.__all__) == {
        "CallbacksObserver",
        "JsonlTraceWriter",
        "Observer",
        "OtelBookGauges",
        "OtelObserver",
        "PrometheusBookCollector",
        "PrometheusObserver",
        "RunEvent",
        "StepEvent",
        "TokensEvent",
        "count_tokens_after_deadline",
        "get_observers",
        "run_fields",
        "set_observers",
        "step_fields",
    }
    for name in instrument.__all__:
        assert hasattr(instrument, name), name


def test_mcp_module_surface_needs_no_mcp_package_to_import() -> None:
    import subprocess
    import sys

    import langgraph_deadline.mcp as mcp

    assert set(mcp.__all__) == {"mcp_tools"}
    code = (
        "import sys; import langgraph_deadline.mcp; "
        "assert 'mcp' not in sys.modules and 'langchain_mcp_adapters' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_http_and_asgi_module_surfaces() -> None:
    import langgraph_deadline.asgi as asgi
    import langgraph_deadline.http as http

    assert set(http.__all__) == {"WireFormat", "deadline_hooks", "from_headers", "to_headers"}
    assert set(asgi.__all__) == {"DeadlineASGIMiddleware"}


def test_every_public_name_is_in_the_api_reference() -> None:
    import importlib
    import re
    from pathlib import Path

    api = (Path(__file__).parents[1] / "docs" / "api.md").read_text()
    documented = {d.rsplit(".", 1)[-1] for d in re.findall(r"^::: ([\w.]+)", api, re.M)}
    for module in PUBLIC_MODULES:
        names = importlib.import_module(module).__all__
        missing = sorted(set(names) - documented)
        assert not missing, f"{module}: {missing} not in docs/api.md"


def test_temporal_module_surface() -> None:
    pytest.importorskip("temporalio")
    import langgraph_deadline.temporal as temporal

    assert set(temporal.__all__) == {
        "DEADLINE_EXCEEDED",
        "DeadlineInterceptor",
        "deadline_memo",
        "deadline_result",
        "workflow_deadline",
        "workflow_grant",
    }
