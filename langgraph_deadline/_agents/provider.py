"""What the provider learns of a model call's budget: a request `timeout` for models whose SDK
takes one per call, and an output-token limit cut to what the budget can stream (at a rate
given, or learned per model id), under the name that model's provider takes (`PROVIDERS`);
and what the model itself learns of it: the length hint, a line of its system message asking
for an answer it can finish in that many tokens."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, convert_to_messages
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableBinding, RunnableSequence
from langchain_core.runnables.configurable import DynamicRunnable

from .._core.sync_http import ensure as ensure_http
from .._learn.policy import Learned

__all__ = [
    "FASTEST_TOKENS_PER_SECOND",
    "LENGTH_HINT",
    "MIN_ANSWER_TOKENS",
    "PROVIDERS",
    "WORDS_PER_TOKEN",
    "CallOptions",
    "Provider",
    "Rate",
    "TokenLimit",
    "call_options",
    "check_rate",
    "chat_model",
    "length_hint",
    "model_id",
    "noted",
    "provider_of",
    "settings_max_tokens",
    "with_length_hint",
    "with_system_note",
]

Rate = float | Learned
"""A model's output rate: tokens per second, or learned (time to first token and seconds per
token, per model id, from its streamed calls)."""


def _positive(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class TokenLimit:
    """Where a model family takes its output-token limit: the call keyword `keyword` (the
    user's own limit may also be under the keywords `also`, or the model's `field`). With
    `within`, the limit goes inside the mapping that call keyword holds when the call has one
    (Bedrock's `inferenceConfig`), or always, built by `defaults` from the model when the call
    has none (Ollama's `options`, which replace the model's own when given: they are sent whole)."""

    keyword: str
    field: str = "max_tokens"
    also: tuple[str, ...] = ()
    within: str | None = None
    defaults: Callable[[object, Mapping[str, Any]], dict[str, Any]] | None = None

    def given(self, model: object, settings: Mapping[str, Any]) -> int | None:
        """The limit already in force for a call with `settings` (its keyword arguments)."""
        inner = settings.get(self.within) if self.within is not None else None
        if isinstance(inner, Mapping):  # it replaces the model's own: the only limit
            return _positive(inner.get(self.keyword))
        for key in (self.keyword, *self.also):
            if (value := _positive(settings.get(key))) is not None:
                return value
        return _positive(getattr(model, self.field, None))

    def options(self, model: object, settings: Mapping[str, Any], tokens: int) -> dict[str, Any]:
        """The keyword arguments that set the limit to `tokens`, merged into what the call
        (`settings`) or the model already sends."""
        if self.within is None:
            return {self.keyword: tokens}
        inner = settings.get(self.within)
        if isinstance(inner, Mapping):
            return {self.within: {**inner, self.keyword: tokens}}
        if self.defaults is None:
            return {self.keyword: tokens}
        return {self.within: {**self.defaults(model, settings), self.keyword: tokens}}


_OLLAMA_OPTIONS: Final = (
    "mirostat",
    "mirostat_eta",
    "mirostat_tau",
    "num_ctx",
    "num_gpu",
    "num_thread",
    "num_predict",
    "repeat_last_n",
    "repeat_penalty",
    "temperature",
    "seed",
    "stop",
    "tfs_z",
    "top_k",
    "top_p",
)
"""The fields `ChatOllama` (langchain-ollama 1.1) sends as `options` when a call gives none."""


def _ollama_options(model: object, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The `options` a `ChatOllama` call sends of itself: the model's fields that are set, and
    the call's `stop` (which a call giving `options` would otherwise drop)."""
    options = {k: v for k in _OLLAMA_OPTIONS if (v := getattr(model, k, None)) is not None}
    if settings.get("stop") is not None:
        options["stop"] = settings["stop"]
    return options


@dataclasses.dataclass(frozen=True, slots=True)
class Provider:
    """How one family of LangChain chat models takes a call's budget: its classes (those
    defined in, or derived from a class of, a module starting with one of `modules`), its
    output-token limit (`tokens`), and, when a per-call `timeout=` (seconds) reaches its SDK
    as the request's timeout, the model's field holding its own (`timeout`; None: no per-call
    timeout reaches it)."""

    name: str
    modules: tuple[str, ...]
    tokens: TokenLimit
    timeout: str | None = None

    def own_timeout(self, model: object) -> float | None:
        """The request timeout the model was made with (seconds), if it is one number."""
        value = getattr(model, self.timeout, None) if self.timeout is not None else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
        return None


_MAX_TOKENS: Final = TokenLimit("max_tokens")

PROVIDERS: Final[tuple[Provider, ...]] = (
    # ChatOpenAI, AzureChatOpenAI and every class built on BaseChatOpenAI (ChatDeepSeek,
    # ChatXAI, ChatTogether, ...): the OpenAI SDK's `create(timeout=...)`; `max_tokens` is sent
    # as `max_completion_tokens` where the API wants it.
    Provider(
        "OpenAI",
        ("langchain_openai.",),
        TokenLimit("max_tokens", also=("max_completion_tokens",)),
        timeout="request_timeout",
    ),
    # The Anthropic SDK's `messages.create(timeout=...)`: call keywords go into its arguments.
    Provider("Anthropic", ("langchain_anthropic.",), _MAX_TOKENS, "default_request_timeout"),
    # google-genai's `HttpOptions(timeout=...)`, in ms, from the call's `timeout` in seconds.
    Provider(
        "Google Gemini",
        ("langchain_google_genai.",),
        TokenLimit("max_output_tokens", field="max_output_tokens"),
        timeout="timeout",
    ),
    # Keywords other than its own go to `ollama.AsyncClient.chat` (a TypeError); its client's
    # timeout is set when the model is made (`client_kwargs`).
    Provider(
        "Ollama",
        ("langchain_ollama.",),
        TokenLimit("num_predict", field="num_predict", within="options", defaults=_ollama_options),
    ),
    # Call keywords go into the JSON body: no per-call timeout (its httpx client's is fixed).
    Provider("Mistral", ("langchain_mistralai.",), _MAX_TOKENS),
    # The groq and fireworks SDKs take `create(timeout=...)`, as the OpenAI SDK does.
    Provider("Groq", ("langchain_groq.",), _MAX_TOKENS, "request_timeout"),
    Provider("Fireworks", ("langchain_fireworks.",), _MAX_TOKENS, "request_timeout"),
    # `litellm.completion(max_tokens=...)`, which it maps to each provider's own name; its
    # per-call timeout is not set (litellm's `timeout` is whole-request, not read).
    Provider("LiteLLM", ("langchain_litellm.",), _MAX_TOKENS),
    # Converse's `inferenceConfig.maxTokens` (the call keyword `maxTokens`, or inside the
    # call's own `inferenceConfig`); botocore's read timeout belongs to the client.
    Provider(
        "AWS Bedrock Converse",
        ("langchain_aws.chat_models.bedrock_converse",),
        TokenLimit("maxTokens", within="inferenceConfig"),
    ),
)
"""The model families whose per-call parameters are known (read from their LangChain
packages' source, and tried against loopback servers speaking their wire protocols)."""

_ANY: Final = TokenLimit("max_tokens", also=("max_completion_tokens",))
"""Where the limit of a model of no known family is read (never set: see `call_options`)."""


def chat_model(model: object) -> tuple[object, dict[str, Any]]:
    """The chat model a runnable calls, and the keyword arguments bound around it (`bind`,
    `bind_tools`; the outermost binding wins, as when called): through bindings, a
    `with_structured_output` chain (its first step) and a `configurable_fields` model (its
    default)."""
    bound: list[Mapping[str, Any]] = []
    for _ in range(16):  # a chain of wrappers, never a cycle
        if isinstance(model, RunnableBinding):
            bound.append(model.kwargs)
            model = model.bound
        elif isinstance(model, RunnableSequence):
            model = model.first
        elif isinstance(model, DynamicRunnable):
            model = model.default
        else:
            break
    merged: dict[str, Any] = {}
    for kwargs in reversed(bound):
        merged.update(kwargs)
    return model, merged


_FAMILIES: dict[type, Provider | None] = {}  # a model class -> its family, found once


def _provider_of_class(cls: type) -> Provider | None:
    try:
        return _FAMILIES[cls]
    except KeyError:
        pass
    found = next(
        (
            provider
            for klass in cls.__mro__[:-1]
            for provider in PROVIDERS
            if klass.__module__.startswith(provider.modules)
        ),
        None,
    )
    _FAMILIES[cls] = found
    return found


def provider_of(model: object) -> Provider | None:
    """The family of the chat model `model` calls (None: not one whose parameters we know)."""
    return _provider_of_class(type(chat_model(model)[0]))


def model_id(model: object) -> str:
    """A model's name for its steps: its provider's model id (`model_name`, `model`, as in
    `gpt-4o-mini`) when it has one, else LangChain's name for it (`ChatOpenAI`)."""
    target = chat_model(model)[0]
    for attr in ("model_name", "model", "model_id"):
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


def settings_max_tokens(model: object, settings: Mapping[str, Any]) -> int | None:
    """The output-token limit already in force for a call with `settings` (its keyword
    arguments, a request's model settings): the call's, else the binding's, else the model's,
    each read under the name its provider takes (`num_predict`, `max_output_tokens`, ...)."""
    target, bound = chat_model(model)
    provider = _provider_of_class(type(target))
    limit = _ANY if provider is None else provider.tokens
    return limit.given(target, {**bound, **settings})


class CallOptions(NamedTuple):
    """What a call is given for its budget: `options`, its keyword arguments to merge over
    the call's own; `tokens`, the output-token limit the budget set when it is below the one
    already in force (the length the model must be told), else None."""

    options: dict[str, Any]
    tokens: int | None = None


_TOLD: set[type] = set()  # model classes already warned of taking no known token limit


def _warn_unknown(cls: type, tokens: int) -> None:
    if cls in _TOLD:
        return
    _TOLD.add(cls)
    warnings.warn(
        f"{cls.__name__} takes no output-token limit langgraph-deadline knows of: the "
        f"{tokens} tokens its budget fits are not sent (its calls are still cut at the "
        "deadline). Said once per model class.",
        UserWarning,
        stacklevel=3,
    )


def call_options(
    model: object,
    budget: float | None,
    given: Mapping[str, Any],
    *,
    tokens_per_second: Rate | None = None,
) -> CallOptions:
    """What to set on a call of `model` that has the options `given` (its keyword arguments,
    a request's model settings) for its `budget` (None: nothing).

    `timeout=budget` where the model's SDK takes a per-call timeout (never later than the
    `timeout` given, else the model's own); with `tokens_per_second` (a rate, or learned), the
    output-token limit the budget can stream, under the parameter the model's provider takes,
    merged into what the call or the model sends there, and never above the limit already in
    force. A model of no known family (`PROVIDERS`) gets no limit, and a warning, once per
    class. (The model's sync HTTP client, urllib3's for botocore, is made to obey the deadline
    too: `sync_http.py`; for an async call that its library runs on a thread.)
    """
    if budget is None:
        return CallOptions({})
    ensure_http()
    target, bound = chat_model(model)
    provider = _provider_of_class(type(target))
    options: dict[str, Any] = {}
    if provider is not None and provider.timeout is not None:
        timeout = max(budget, 0.001)  # 0 means "no timeout" to some clients
        mine = given.get("timeout", provider.own_timeout(target))  # the call's replaces the model's
        if isinstance(mine, int | float) and not isinstance(mine, bool) and mine > 0:
            timeout = min(timeout, mine)
        options["timeout"] = timeout
    if tokens_per_second is None:
        return CallOptions(options)
    fits = _tokens_within(model, budget, tokens_per_second)
    if fits is None:
        return CallOptions(options)
    if provider is None:
        _warn_unknown(type(target), fits)
        return CallOptions(options)
    settings = {**bound, **given}
    limit = provider.tokens.given(target, settings)
    if limit is not None and limit <= fits:
        return CallOptions(options)  # the limit in force is the lower: nothing to send
    options.update(provider.tokens.options(target, settings, fits))
    return CallOptions(options, fits)


# -- the length hint ------------------------------------------------------------------------------

WORDS_PER_TOKEN: Final = 0.75
"""Words of English per output token (OpenAI's rule of thumb: a token is about 3/4 of a word)."""

LENGTH_HINT: Final = (
    "Answer in at most {words} words, ending with a complete sentence: a longer answer is cut off."
)
"""The length hint's words: a model told only `max_tokens` (which it never sees) is cut
mid-sentence; told its length budget, it writes a shorter, whole answer."""


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
