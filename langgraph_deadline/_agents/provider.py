"""What the provider learns of a model call's budget: a request `timeout` for models known to
pass it to their SDK, and `max_tokens` cut to what the budget can stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["provider_options", "settings_max_tokens"]

_TIMEOUT_MODULES = ("langchain_openai.",)
"""Model classes whose per-call `timeout` keyword reaches their SDK as a request timeout
(checked against the OpenAI SDK: `create(timeout=...)`, shown in `x-stainless-read-timeout`)."""


def _takes_timeout(model: object) -> bool:
    target = getattr(model, "bound", model)  # a RunnableBinding (bind_tools) wraps the model
    return any(cls.__module__.startswith(_TIMEOUT_MODULES) for cls in type(target).__mro__[:-1])


def provider_options(
    model: object,
    budget: float | None,
    *,
    tokens_per_second: float | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments that tell the provider about a call's budget.

    `timeout=budget` for models known to pass it to their SDK (LangChain's OpenAI family);
    with `tokens_per_second`, `max_tokens` clamped to what the budget can stream (never above
    `max_tokens`, the limit already set). Nothing without a budget.
    """
    options: dict[str, Any] = {}
    if budget is None:
        return options
    if _takes_timeout(model):
        options["timeout"] = max(budget, 0.001)  # 0 means "no timeout" to some clients
    if tokens_per_second is not None:
        fits = max(1, int(budget * tokens_per_second))
        options["max_tokens"] = fits if max_tokens is None else min(fits, max_tokens)
    return options


def settings_max_tokens(model: object, settings: Mapping[str, Any]) -> int | None:
    """The output-token limit already in force for a call: its settings', else the model's."""
    for value in (settings.get("max_tokens"), getattr(model, "max_tokens", None)):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
