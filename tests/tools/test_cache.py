"""Stale-cache backends and namespaces: whose answers may be served to whom, in any store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_deadline import InMemoryStaleCache, StoreStaleCache
from langgraph_deadline._tools.cache import default_namespace, store_label

IDS = ["a.b@example.com", "alice", "", "%2E", ".", "..", "a\x00b", "ü.名前", "a/b:c", "%"]


@pytest.mark.parametrize(
    ("configurable", "namespace"),
    [
        ({"langgraph_auth_user_id": "alice", "user_id": "mallory"}, "auth:alice"),
        ({"langgraph_auth_user_id": "alice", "thread_id": "t1"}, "auth:alice"),
        ({"user_id": "bob", "thread_id": "t1"}, "user:bob"),
        ({"langgraph_auth_user_id": None, "user_id": "bob"}, "user:bob"),
        ({"langgraph_auth_user_id": "", "user_id": "", "thread_id": "t1"}, "thread:t1"),
        ({"user_id": 42}, "user:42"),
        ({"thread_id": "t1"}, "thread:t1"),
        ({}, None),
    ],
)
def test_the_authenticated_identity_comes_first_then_the_user_then_the_thread(
    configurable: dict[str, Any], namespace: str | None
) -> None:
    assert default_namespace({"configurable": configurable}) == namespace


@pytest.mark.parametrize("config", [None, {}, {"configurable": None}, {"configurable": "x"}])
def test_no_configurable_no_namespace(config: Any) -> None:
    assert default_namespace(config) is None


def test_a_client_supplied_user_id_never_lands_in_an_authenticated_users_namespace() -> None:
    forged = default_namespace({"configurable": {"user_id": "alice"}})
    real = default_namespace({"configurable": {"langgraph_auth_user_id": "alice"}})
    assert forged != real


@given(a=st.text(max_size=12), b=st.text(max_size=12))
def test_store_labels_are_valid_and_never_shared(a: str, b: str) -> None:
    la, lb = store_label(a), store_label(b)
    assert la
    assert "." not in la
    assert "\x00" not in la
    assert (la == lb) == (a == b)


def test_plain_ids_keep_their_labels() -> None:
    assert store_label("user:alice") == "user:alice"
    assert store_label("auth:a.b@example.com") == "auth:a%2Eb@example%2Ecom"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseStore]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    conn = sqlite3.connect(tmp_path / "s.sqlite", check_same_thread=False, isolation_level=None)
    sqlite = SqliteStore(conn)
    sqlite.setup()
    yield sqlite
    conn.close()


def test_any_user_id_works_in_a_real_store_and_each_keeps_its_own_answer(
    store: BaseStore,
) -> None:
    cache = StoreStaleCache(store)
    for i, uid in enumerate(IDS):
        cache.put(f"user:{uid}", "stock:k", f"answer {i}")
    for i, uid in enumerate(IDS):
        hit = cache.get(f"user:{uid}", "stock:k")
        assert hit is not None
        assert hit.content == f"answer {i}"
    assert cache.get("user:a%2Eb@example%2Ecom", "stock:k") is None  # not a.b@example.com's


@pytest.mark.anyio
async def test_the_async_path_encodes_the_same_way() -> None:
    cache = StoreStaleCache(InMemoryStore())
    await cache.aput("auth:a.b@example.com", "k", "mine")
    assert cache.get("auth:a.b@example.com", "k") is not None
    hit = await cache.aget("auth:a.b@example.com", "k")
    assert hit is not None
    assert hit.content == "mine"


@pytest.mark.parametrize(
    ("prefix", "error"),
    [
        ("abc", TypeError),  # would be ('a', 'b', 'c')
        ((), TypeError),
        (None, TypeError),
        (("my_app", "v1.0"), ValueError),
        (("my_app", ""), ValueError),
        (("my_app", 5), ValueError),
        (("langgraph", "stale"), ValueError),
    ],
)
def test_a_bad_prefix_is_refused_at_construction(prefix: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="prefix"):
        StoreStaleCache(InMemoryStore(), prefix=prefix)


def test_a_namespace_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="namespace"):
        StoreStaleCache(InMemoryStore()).get(5, "k")  # type: ignore[arg-type]


def test_the_in_memory_cache_keeps_any_namespace_apart() -> None:
    cache = InMemoryStaleCache(max_entries=100)
    for uid in IDS:
        cache.put(f"user:{uid}", "k", uid)
    assert [cache.get(f"user:{uid}", "k").content for uid in IDS] == IDS  # type: ignore[union-attr]


def _caching_graph(cache: StoreStaleCache, store: BaseStore | None) -> Any:
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class S(TypedDict, total=False):
        seen: str | None

    async def node(state: S) -> dict[str, Any]:
        await cache.aput("user:alice", "k", "cached")
        hit = await cache.aget("user:alice", "k")
        return {"seen": None if hit is None else hit.content}

    b = StateGraph(S)
    b.add_node("node", node)
    b.add_edge(START, "node")
    return b.compile(store=store)


@pytest.mark.anyio
async def test_a_store_cache_without_a_store_uses_the_running_graphs_own() -> None:
    store = InMemoryStore()
    cache = StoreStaleCache(None)
    out = await _caching_graph(cache, store).ainvoke({})
    assert out["seen"] == "cached"
    (item,) = store.search(("langgraph_deadline", "stale", "user:alice"))
    assert item.key == "k" and item.value["content"] == "cached"


@pytest.mark.anyio
async def test_a_store_cache_in_a_run_without_a_store_caches_nothing_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = StoreStaleCache(None)
    with caplog.at_level("WARNING", logger="langgraph_deadline"):
        assert (await _caching_graph(cache, None).ainvoke({}))["seen"] is None
        cache.put("user:alice", "k", "outside any run")
        assert cache.get("user:alice", "k") is None
    assert caplog.text.count("found no store") == 1
