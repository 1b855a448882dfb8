"""`MiddlewareSettings`: what `DeadlineMiddleware` was told, checked once, kept as one value."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping, Sequence

from .._core.rules import StepRule
from .._core.validate import (
    check_cap,
    check_fits,
    check_limit,
    check_mapping,
    check_seconds,
)
from .._learn.book import LatencyBook
from .model import Fallbacks, ModelLimits

__all__ = ["MiddlewareSettings"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MiddlewareSettings:
    """The run's `timeout` and `reserve`, the caps of tool calls, what a model call may take
    (`model_limits`, checked when made), whether a cut model call's streamed text is kept
    (`partial_answer`), the models to fall back to (`fallbacks`), whether model calls get the
    budget note (`budget_note`) and the book attached to the agent (`book`: its tool times,
    and its model's output rate unless `model_limits.learned_max_tokens` is False). Checked
    when made; `tool_caps` is kept read-only; tool caps may be learned (`StepRule`s). See
    `DeadlineMiddleware`.

    Raises:
        TypeError, ValueError: a time is not a finite number >= 0; `model_limits` is not a
            `ModelLimits`; `partial_answer` or `budget_note` is not a bool.
    """

    timeout: float | None = None
    reserve: float = 0.0
    tool_caps: Mapping[str, float | StepRule | None] = dataclasses.field(default_factory=dict)
    default_tool_cap: float | StepRule | None = None
    model_limits: ModelLimits = dataclasses.field(default_factory=ModelLimits)
    partial_answer: bool = True
    fallbacks: Fallbacks | None = None  # checked by `fallbacks_of` when the middleware is made
    budget_note: bool = False
    book: LatencyBook | None = None  # checked when the middleware is made

    def __post_init__(self) -> None:
        checked = {  # in the order of the arguments: the first mistake is the one reported
            "timeout": check_cap(self.timeout, "timeout"),
            "reserve": check_seconds(self.reserve, "reserve"),
            "tool_caps": types.MappingProxyType(
                {
                    name: check_limit(cap, f"tool_caps[{name!r}]")
                    for name, cap in check_mapping(self.tool_caps, "tool_caps").items()
                }
            ),
            "default_tool_cap": check_limit(self.default_tool_cap, "default_tool_cap"),
        }
        if not isinstance(self.model_limits, ModelLimits):
            raise TypeError(
                f"model_limits must be a ModelLimits, got {type(self.model_limits).__name__}"
            )
        for flag in ("partial_answer", "budget_note"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        check_fits(
            self.timeout,
            reserve=self.reserve,
            needs={"model_limits.min_viable": self.model_limits.min_viable},
        )

    def check_tool_names(self, tools: Sequence[object]) -> None:
        """Refuse `tool_caps` naming a tool the agent does not have (a typo would leave the
        tool it meant uncapped): `tools` are a model call's, the first moment the agent's tools
        are known (a `BaseTool`'s name, or a provider tool's `name`).

        Raises:
            ValueError: naming the unknown tools and the agent's.
        """
        if not self.tool_caps:
            return
        names = {n for t in tools if isinstance(n := _tool_name(t), str)}
        unknown = sorted(set(self.tool_caps) - names)
        if unknown:
            raise ValueError(
                f"tool_caps names unknown tools {unknown}; the agent's tools are {sorted(names)}"
            )

    def tool_cap(self, name: str) -> float | StepRule | None:
        """The cap of tool `name`: its own in `tool_caps`, else `default_tool_cap`."""
        return self.tool_caps.get(name, self.default_tool_cap)


def _tool_name(tool: object) -> object:
    if isinstance(tool, Mapping):  # a provider's tool spec: {"name": ...} or OpenAI's form
        function = tool.get("function")
        return function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return getattr(tool, "name", None)
