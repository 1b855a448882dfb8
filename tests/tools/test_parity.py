"""`deadline_tool` is `@tool`: for every form and option of `@tool`, the two tools look the same to
a user and to the model (name, description, schemas, `extras`, flags) and answer the same
`ToolMessage` (content, status, artifact) or raise the same error, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, ToolException, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field

from langgraph_deadline import deadline_tool

Decorator = Callable[..., Any]


class Query(BaseModel):
    """Search the docs."""

    q: str = Field(description="what to look for")
    limit: int = 3


QUERY_JSON = {
    "type": "object",
    "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["q"],
}


def plain(t: Decorator) -> BaseTool:
    @t
    def search(q: str, limit: int = 3) -> str:
        """Search the docs for `q`."""
        return f"{limit} hits for {q}"

    return search


def coroutine(t: Decorator) -> BaseTool:
    @t
    async def search(q: str, limit: int = 3) -> str:
        """Search the docs for `q`."""
        await asyncio.sleep(0)
        return f"{limit} hits for {q}"

    return search


def renamed(t: Decorator) -> BaseTool:
    @t("find_docs")
    def search(q: str) -> str:
        """Search the docs."""
        return f"hits for {q}"

    return search


def described(t: Decorator) -> BaseTool:
    @t(description="Look things up.", return_direct=True)
    def search(q: str) -> str:
        return f"hits for {q}"

    return search


def with_model_schema(t: Decorator) -> BaseTool:
    @t(args_schema=Query)
    def search(q: str, limit: int = 3) -> str:
        """Search."""
        return f"{limit} hits for {q}"

    return search


def with_json_schema(t: Decorator) -> BaseTool:
    @t(args_schema=QUERY_JSON)
    def search(q: str, limit: int = 3) -> str:
        """Search."""
        return f"{limit} hits for {q}"

    return search


def without_schema(t: Decorator) -> BaseTool:
    @t(infer_schema=False)
    def search(query: str) -> str:
        """Search the docs with one string."""
        return f"hits for {query}"

    return search


def from_docstring(t: Decorator) -> BaseTool:
    @t(parse_docstring=True)
    def search(q: str, limit: int = 3) -> str:
        """Search the docs.

        Args:
            q: What to look for.
            limit: How many hits.
        """
        return f"{limit} hits for {q}"

    return search


def lenient_docstring(t: Decorator) -> BaseTool:
    @t(parse_docstring=True, error_on_invalid_docstring=False)
    def search(q: str) -> str:
        """Search the docs.
        Args:
            banana: not an argument.
        """
        return f"hits for {q}"

    return search


def with_artifact(t: Decorator) -> BaseTool:
    @t(response_format="content_and_artifact")
    def search(q: str) -> tuple[str, dict[str, Any]]:
        """Search."""
        return f"hits for {q}", {"ids": [1, 2]}

    return search


def with_extras(t: Decorator) -> BaseTool:
    @t(extras={"cache_control": {"type": "ephemeral"}})
    def search(q: str) -> str:
        """Search."""
        return f"hits for {q}"

    return search


RUNNABLE = RunnableLambda(lambda d: f"hits for {d['q']}").with_types(input_type=Query)


def named_runnable(t: Decorator) -> BaseTool:
    return t("search", RUNNABLE)  # type: ignore[no-any-return]


def decorated_runnable(t: Decorator) -> BaseTool:
    return t(description="Search the docs.")(RUNNABLE)  # type: ignore[no-any-return]


def wrapped_existing(t: Decorator) -> BaseTool:
    made = with_extras(tool)
    return made if t is tool else deadline_tool(made, cap=5)


FORMS = [
    plain,
    coroutine,
    renamed,
    described,
    with_model_schema,
    with_json_schema,
    without_schema,
    from_docstring,
    lenient_docstring,
    with_artifact,
    with_extras,
    named_runnable,
    decorated_runnable,
    wrapped_existing,
]
ARGS = {"q": "retries", "limit": 2}


def seen(t: BaseTool) -> dict[str, Any]:
    """What a user and the model see of a tool."""
    schema = t.tool_call_schema
    return {
        "name": t.name,
        "description": t.description,
        "args": t.args,
        "tool_call_schema": schema if isinstance(schema, dict) else schema.model_json_schema(),
        "openai": convert_to_openai_tool(t),
        "extras": t.extras,
        "response_format": t.response_format,
        "return_direct": t.return_direct,
        "metadata": t.metadata,
        "tags": t.tags,
    }


def call_args(t: BaseTool) -> dict[str, Any]:
    props = convert_to_openai_tool(t)["function"]["parameters"]["properties"]
    if "__arg1" in props:
        return {"__arg1": "retries"}
    return {k: v for k, v in ARGS.items() if k in props}


def outcome(t: BaseTool, args: dict[str, Any], *, sync: bool) -> Any:
    """The ToolMessage (as a dict of what matters) or the error a tool call gives."""
    call = {"type": "tool_call", "id": "call-1", "name": t.name, "args": args}
    try:
        out = t.invoke(call) if sync else asyncio.run(t.ainvoke(call))
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    assert isinstance(out, ToolMessage)
    return {
        "content": out.content,
        "status": out.status,
        "artifact": out.artifact,
        "name": out.name,
        "tool_call_id": out.tool_call_id,
    }


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_every_tool_form_looks_the_same_to_users_and_to_the_model(form: Callable) -> None:
    ours, theirs = seen(form(deadline_tool)), seen(form(tool))
    if form is without_schema:
        # The one difference: a schema-less `Tool` is shown to the model as one string
        # `__arg1` by an `isinstance(tool, Tool)` test in LangChain; ours gives the model that
        # same one-string schema (without the `title` keyword) as its `tool_call_schema`.
        for key in ("tool_call_schema", "openai"):
            ours.pop(key), theirs.pop(key)
    assert ours == theirs


def test_a_tool_without_schema_takes_one_string_named_as_tool_names_it() -> None:
    ours, theirs = without_schema(deadline_tool), without_schema(tool)
    params = convert_to_openai_tool(theirs)["function"]["parameters"]
    props = {k: {"type": v["type"]} for k, v in params["properties"].items()}
    assert convert_to_openai_tool(ours)["function"]["parameters"] == {**params, "properties": props}
    assert outcome(ours, {"__arg1": "x"}, sync=True) == outcome(theirs, {"__arg1": "x"}, sync=True)


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("form", FORMS, ids=lambda f: f.__name__)
def test_every_tool_form_answers_a_tool_call_with_the_same_message(
    form: Callable, sync: bool
) -> None:
    ours, theirs = form(deadline_tool), form(tool)
    args = call_args(theirs)
    assert outcome(ours, args, sync=sync) == outcome(theirs, args, sync=sync)
    assert outcome(ours, {"limit": "many"}, sync=sync) == outcome(
        theirs, {"limit": "many"}, sync=sync
    )


def failing(t: Decorator, error: Exception) -> BaseTool:
    @t
    def lookup(q: str) -> str:
        """Look up `q`."""
        raise error

    return lookup


HANDLERS: list[Any] = [True, "lookup is down, try later", lambda e: f"handled: {e}", False]


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("handler", HANDLERS, ids=["true", "text", "function", "false"])
def test_tool_errors_are_handled_as_tool_handles_them_even_when_set_after_creation(
    handler: Any, sync: bool
) -> None:
    ours = failing(deadline_tool, ToolException("backend said no"))
    theirs = failing(tool, ToolException("backend said no"))
    ours.handle_tool_error = theirs.handle_tool_error = handler
    assert outcome(ours, {"q": "x"}, sync=sync) == outcome(theirs, {"q": "x"}, sync=sync)


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("handler", HANDLERS, ids=["true", "text", "function", "false"])
def test_validation_errors_are_handled_as_tool_handles_them(handler: Any, sync: bool) -> None:
    ours, theirs = with_model_schema(deadline_tool), with_model_schema(tool)
    ours.handle_validation_error = theirs.handle_validation_error = handler
    bad = {"q": "x", "limit": "many"}
    assert outcome(ours, bad, sync=sync) == outcome(theirs, bad, sync=sync)


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_other_errors_propagate_unchanged(sync: bool) -> None:
    ours = failing(deadline_tool, ValueError("bad input"))
    theirs = failing(tool, ValueError("bad input"))
    assert outcome(ours, {"q": "x"}, sync=sync) == outcome(theirs, {"q": "x"}, sync=sync)
    assert outcome(ours, {"q": "x"}, sync=sync)[0] == "raised"


def test_fields_set_after_creation_reach_the_model_and_the_message() -> None:
    ours, theirs = plain(deadline_tool), plain(tool)
    for t in (ours, theirs):
        t.name = "lookup"
        t.description = "Look it up."
        t.args_schema = Query
        t.extras = {"defer_loading": True}
    assert seen(ours) == seen(theirs)
    assert outcome(ours, ARGS, sync=True) == outcome(theirs, ARGS, sync=True)


def test_setting_a_field_never_changes_the_tool_that_was_wrapped() -> None:
    original = plain(tool)
    ours = deadline_tool(original, cap=5)
    ours.name = "lookup"
    ours.handle_tool_error = True
    assert (original.name, original.handle_tool_error) == ("search", False)
    copied = ours.model_copy(update={"name": "find"})
    assert outcome(copied, ARGS, sync=True)["name"] == "find"
    assert ours.name == "lookup"


def test_bad_tool_arguments_fail_as_they_do_for_tool() -> None:
    def bad_docstring(t: Decorator) -> BaseTool:
        @t(parse_docstring=True)
        def search(q: str) -> str:
            """Search.
            Args:
                banana: not an argument.
            """
            return q

        return search

    for form in (bad_docstring, lambda t: t(RUNNABLE)):
        with pytest.raises(ValueError, match=r"\w") as theirs:
            form(tool)
        with pytest.raises(ValueError, match=r"\w") as ours:
            form(deadline_tool)
        assert str(ours.value) == str(theirs.value)


def test_tool_options_with_an_existing_tool_are_refused_with_where_to_set_them() -> None:
    with pytest.raises(TypeError, match=r"\['extras'\] on 'search'"):
        deadline_tool(plain(tool), extras={"a": 1})
