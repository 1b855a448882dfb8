"""What the provider learns of a model call's budget: a request `timeout` for models known to
pass it to their SDK, and `max_tokens` cut to what the budget can stream (at a rate given, or
learned per model id); and what the model itself learns of it: the length hint, a line of its
system message asking for an answer it can finish in that many tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue

from .._learn.policy import Learned

__all__ = [
    "FASTEST_TOKENS_PER_SECOND",
    "LENGTH_HINT",
    "MIN_ANSWER_TOKENS",
    "WORDS_PER_TOKEN",
    "Rate",
    "budget_tokens",
    "call_options",
    "check_rate",
    "length_hint",
    "model_id",
    "noted",
    "provider_options",
    "settings_max_tokens",
    "with_length_hint",
    "with_system_note",
]

Rate = float | Learned
"""A model's output rate: tokens per second, or learned (time to first token and seconds per
token, per model id, from its streamed calls)."""

_TIMEOUT_MODULES = ("langchain_openai.",)
"""Model classes whose per-call `timeout` keyword reaches their SDK as a request timeout
(checked against the OpenAI SDK: `create(timeout=...)`, shown in `x-stainless-read-timeout`)."""


def _target(model: object) -> object:
    return getattr(model, "bound", model)  # a RunnableBinding (bind_tools) wraps the model


def _takes_timeout(model: object) -> bool:
    return any(
        cls.__module__.startswith(_TIMEOUT_MODULES) for cls in type(_target(model)).__mro__[:-1]
    )


def model_id(model: object) -> str:
    """A model's name for its steps: its provider's model id (`model_name`, `model`, as in
    `gpt-4o-mini`) when it has one, else LangChain's name for it (`ChatOpenAI`)."""
    target = _target(model)
    for attr in ("model_name", "model"):
        value = getattr(target, attr, None)
        if isinstance(value, str) and value:
            return value
    get_name = getattr(target, "get_name", None)
    return str(get_name()) if callable(get_name) else type(target).__name__


def check_rate(value: object, name: str = "tokens_per_second") -> Rate | None:
    """`value` as a model's output rate: None, a finite number > 0, or `learned(book, ...)`."""
    if value is None or isinstance(value, Learned):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number or learned(book, ...), got {type(value).__name__}"
        )
    rate = float(value)
    if not (rate > 0 and rate != float("inf")):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return rate


MIN_ANSWER_TOKENS: Final = 12
"""The fewest output tokens a budget sets as `max_tokens` (about 9 words, one short sentence).
Fewer are no answer (a limit of 1 answers "Your "): a call whose time fits fewer gets no limit
from its budget, as without a rate, so that cut at its budget it closes the run in words, its
partial answer and the tools' findings with it, instead of completing with a stub."""

FASTEST_TOKENS_PER_SECOND: Final = 2000.0
"""The most tokens a second a budget's `max_tokens` counts on, whatever rate was given or
learned (the fastest hosted models stream about this many): a rate learned from a burst of
tokens that came in one read would otherwise ask for thousands of tokens the time cannot
stream."""


def _tokens_within(model: object, budget: float, rate: Rate) -> int | None:
    """The `max_tokens` that fits `budget` at `rate`, at most what `FASTEST_TOKENS_PER_SECOND`
    streams; None when it is cold, or below `MIN_ANSWER_TOKENS`."""
    if isinstance(rate, Learned):
        fits = rate.tokens_within(model_id(model), budget)
        if fits is None:
            return None
    else:
        fits = int(budget * rate)
    fits = min(fits, int(budget * FASTEST_TOKENS_PER_SECOND))
    return fits if fits >= MIN_ANSWER_TOKENS else None


def provider_options(
    model: object,
    budget: float | None,
    *,
    tokens_per_second: Rate | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments that tell the provider about a call's budget.

    `timeout=budget` for models known to pass it to their SDK (LangChain's OpenAI family);
    with `tokens_per_second` (a rate, or learned), `max_tokens` clamped to what the budget can
    stream (never above `max_tokens`, the limit already set; none when that is fewer than
    `MIN_ANSWER_TOKENS`). Nothing without a budget.
    """
    options: dict[str, Any] = {}
    if budget is None:
        return options
    if _takes_timeout(model):
        options["timeout"] = max(budget, 0.001)  # 0 means "no timeout" to some clients
    if tokens_per_second is not None:
        fits = _tokens_within(model, budget, tokens_per_second)
        if fits is not None:
            options["max_tokens"] = fits if max_tokens is None else min(fits, max_tokens)
    return options


def settings_max_tokens(model: object, settings: Mapping[str, Any]) -> int | None:
    """The output-token limit already in force for a call: its settings', else the model's
    (or, for a model with tools bound, the binding's or the model's)."""
    target = _target(model)
    bound = getattr(model, "kwargs", None) if target is not model else None
    values = [settings.get("max_tokens"), settings.get("max_completion_tokens")]
    if isinstance(bound, Mapping):
        values += [bound.get("max_tokens"), bound.get("max_completion_tokens")]
    values.append(getattr(target, "max_tokens", None))
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def call_options(
    model: object,
    budget: float | None,
    given: Mapping[str, Any],
    *,
    tokens_per_second: Rate | None = None,
) -> dict[str, Any]:
    """What to set on a call that has the options `given` (its keyword arguments, a request's
    model settings) for its budget: never a later `timeout`, nor more `max_tokens`, than
    those it has."""
    options = provider_options(
        model,
        budget,
        tokens_per_second=tokens_per_second,
        max_tokens=settings_max_tokens(model, given),
    )
    timeout = given.get("timeout")
    if "timeout" in options and isinstance(timeout, int | float) and timeout > 0:
        options["timeout"] = min(options["timeout"], timeout)
    return options


# -- the length hint ------------------------------------------------------------------------------

WORDS_PER_TOKEN: Final = 0.75
"""Words of English per output token (OpenAI's rule of thumb: a token is about 3/4 of a word)."""

LENGTH_HINT: Final = (
    "Answer in at most {words} words, ending with a complete sentence: a longer answer is cut off."
)
"""The length hint's words: a model told only `max_tokens` (which it never sees) is cut
mid-sentence; told its length budget, it writes a shorter, whole answer."""


def budget_tokens(options: Mapping[str, Any], limit: int | None) -> int | None:
    """The `max_tokens` the budget set on a call (`options`, from `call_options`), when it is
    below the `limit` already in force (the caller's own): the length the model must be told.
    None when the budget set none, or the caller's own limit is the lower."""
    tokens = options.get("max_tokens")
    if not isinstance(tokens, int) or (limit is not None and tokens >= limit):
        return None
    return tokens


def length_hint(tokens: int) -> str:
    """The hint for an answer of at most `tokens` output tokens (`LENGTH_HINT`, in words)."""
    return LENGTH_HINT.format(words=max(1, int(tokens * WORDS_PER_TOKEN)))


def noted(system: SystemMessage | None, note: str) -> SystemMessage:
    """`system` (a system message, or None) with `note` at its end: a new one if None."""
    if system is None:
        return SystemMessage(note)
    content = system.content
    if isinstance(content, str):
        joined: str | list[Any] = f"{content}\n\n{note}" if content else note
    else:
        joined = [*content, {"type": "text", "text": note}]
    return system.model_copy(update={"content": joined})


def with_system_note(messages: Sequence[BaseMessage], note: str) -> list[BaseMessage]:
    """`messages` with `note` at the end of their leading system message (a new one first if
    they have none): where every provider takes a system message."""
    if messages and isinstance(messages[0], SystemMessage):
        return [noted(messages[0], note), *messages[1:]]
    return [noted(None, note), *messages]


def with_length_hint(input: object, tokens: int) -> list[BaseMessage]:
    """A chat model's `input` (a string, messages, a prompt value) as messages, the length hint
    for `tokens` at the end of its system message."""
    if isinstance(input, PromptValue):
        messages = input.to_messages()
    elif isinstance(input, str):
        messages = [HumanMessage(input)]
    else:
        messages = convert_to_messages(input)  # type: ignore[arg-type]
    return with_system_note(messages, length_hint(tokens))
