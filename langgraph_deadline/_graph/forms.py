"""The deadline fields for pydantic and dataclass states, alike to the `DeadlineState` mixin.

Same fields, same channels: checkpoints hold plain data, a new run's deadline replaces the
previous run's, resumes keep theirs.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from .._core.records import Outcome, StepRecord
from .state import (
    DeadlineChannel,
    OutcomeChannel,
    TraceChannel,
    merge_deadline,
    merge_outcome,
    merge_trace,
)

__all__ = ["DeadlineDataclass", "DeadlineModel"]

_NONE: Any = type(None)


class DeadlineModel(BaseModel):
    """Subclass for a pydantic graph state with the deadline fields (see `DeadlineState`).

    ```python
    class State(DeadlineModel):
        question: str
    ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    deadline: Annotated[float | None, DeadlineChannel(_NONE, merge_deadline)] = None
    deadline_outcome: Annotated[Outcome | None, OutcomeChannel(_NONE, merge_outcome)] = None
    deadline_trace: Annotated[list[StepRecord], TraceChannel(list, merge_trace)] = Field(
        default_factory=list
    )


@dataclasses.dataclass(kw_only=True)
class DeadlineDataclass:
    """Subclass (as a `@dataclass`) for a dataclass graph state with the deadline fields (see
    `DeadlineState`). Its fields are keyword-only, so yours may come without defaults.

    ```python
    @dataclass
    class State(DeadlineDataclass):
        question: str
    ```
    """

    deadline: Annotated[float | None, DeadlineChannel(_NONE, merge_deadline)] = None
    deadline_outcome: Annotated[Outcome | None, OutcomeChannel(_NONE, merge_outcome)] = None
    deadline_trace: Annotated[list[StepRecord], TraceChannel(list, merge_trace)] = (
        dataclasses.field(default_factory=list)
    )
