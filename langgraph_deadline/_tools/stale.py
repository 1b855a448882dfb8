"""The stale-cache glue of a read-only tool: where its answers are kept (namespace and key), and
how a cached answer is served when the live call cannot be: marked stale, with its age."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from .cache import cache_key, default_namespace

__all__ = [
    "Namespace",
    "default_namespace",
    "namespace_of",
    "slot",
    "stale_content",
    "stored_content",
    "tool_call_id",
    "visible_args",
    "warn_uncached",
]

Namespace = str | Callable[[RunnableConfig], str | None] | None
"""Whose answers a cache entry is: a fixed string, a function of the config, or None (default)."""


def namespace_of(namespace: Namespace, cfg: RunnableConfig) -> str | None:
    """The namespace a call's answer is kept under (None: not cached)."""
    if namespace is None:
        return default_namespace(cfg)
    if isinstance(namespace, str):
        return namespace
    return namespace(cfg)


def slot(
    tool: BaseTool, namespace: Namespace, input: Any, cfg: RunnableConfig
) -> tuple[str, str] | None:
    """(namespace, key) of a call's answer in the cache, or None when it has no namespace."""
    ns = namespace_of(namespace, cfg)
    if ns is None:
        return None
    return ns, cache_key(tool.name, visible_args(tool, input))


def warn_uncached(tool: str) -> None:
    """Say (once per tool, the caller keeps count) that a call of a cached tool had no namespace:
    the tenant-safe default keeps its answers for nobody rather than for everybody."""
    warnings.warn(
        f"the stale cache of tool {tool!r} is off for this call: its config has no "
        "langgraph_auth_user_id, user_id or thread_id to keep users' answers apart, so nothing "
        "is cached or served. Pass one in config['configurable'], or set cache_namespace= "
        "(cache_namespace='public' for data every user may share). Said once per tool.",
        UserWarning,
        stacklevel=2,
    )


def tool_call_id(input: Any) -> str | None:
    """The id of the tool call `input` is, or None when it is plain arguments."""
    if isinstance(input, Mapping) and input.get("type") == "tool_call" and "args" in input:
        call_id = input.get("id")
        return str(call_id) if call_id is not None else None
    return None


def visible_args(tool: BaseTool, input: Any) -> Any:
    """The arguments the model gave: injected ones (a config, state) are not part of the key."""
    args = input.get("args", {}) if tool_call_id(input) is not None else input
    if not isinstance(args, Mapping):
        return args
    visible = _schema_fields(tool)
    return {k: v for k, v in args.items() if visible is None or k in visible}


def stored_content(value: Any) -> Any:
    """What is cached of a tool's answer: a `ToolMessage`'s content, else the value itself."""
    return value.content if isinstance(value, ToolMessage) else value


def stale_content(tool: str, content: Any, *, age_s: float, failed: bool) -> Any:
    """A cached answer, headed by a note that it is `age_s` old and why the live call gave none."""
    note = (
        f"[stale result from {age_s:.0f} s ago: the live call to '{tool}' "
        f"{'failed' if failed else 'timed out'}; this cached answer may be "
        "out of date — say so if you rely on it]\n"
    )
    if isinstance(content, str):
        return note + content
    if isinstance(content, list):
        return [{"type": "text", "text": note}, *content]
    return note + str(content)


def _schema_fields(tool: BaseTool) -> set[str] | None:
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        props = schema.get("properties")
        return set(props) if isinstance(props, dict) else None
    fields = getattr(schema, "model_fields", None)
    return set(fields) if isinstance(fields, dict) else None
