"""A small scripted chat model that supports `bind_tools` (langchain-core's fakes do not)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class ScriptedChatModel(BaseChatModel):
    """Answers each call with the next scripted reply: an `AIMessage`, or a function of the
    messages so far that returns one."""

    script: list[AIMessage | Callable[[list[BaseMessage]], AIMessage]] = Field(default_factory=list)
    calls: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _next(self, messages: list[BaseMessage]) -> ChatResult:
        self.calls.append(list(messages))
        step = self.script.pop(0) if self.script else AIMessage("done")
        reply = step(messages) if callable(step) else step
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._next(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._next(messages)


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[
            {"name": name, "args": args, "id": f"call-{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )


def openai_chat(server: Any, **kwargs: Any) -> Any:
    """A real streaming `ChatOpenAI` pointed at a `FakeOpenAIServer`."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    options: dict[str, Any] = {"streaming": True, **kwargs}
    return ChatOpenAI(
        base_url=server.base_url, api_key=SecretStr("test"), model="gpt-fake", **options
    )
