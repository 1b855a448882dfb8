"""Tools to prove cancellation in your own graphs: a manual clock and loopback servers that report
what they saw (was the connection closed? how many tokens were sent after the deadline?).

`FakeOpenAIServer` needs the `asgi` extra (starlette, uvicorn); it is imported on first use.
"""

from typing import TYPE_CHECKING, Any

from .._core.clock import ManualClock
from ._quiet import RecordingServer, assert_nothing_sent_after, await_nothing_sent_after
from ._slow_server import ServedRequest, SlowServer

if TYPE_CHECKING:
    from ._openai_server import ChatReply, FakeOpenAIServer, ScriptedToolCall, ServedChatRequest

__all__ = [
    "ChatReply",
    "FakeOpenAIServer",
    "ManualClock",
    "RecordingServer",
    "ScriptedToolCall",
    "ServedChatRequest",
    "ServedRequest",
    "SlowServer",
    "assert_nothing_sent_after",
    "await_nothing_sent_after",
]

_LAZY = {"ChatReply", "FakeOpenAIServer", "ScriptedToolCall", "ServedChatRequest"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _openai_server

        return getattr(_openai_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
