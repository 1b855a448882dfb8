"""Hedged read-only tools, side by side with the hedging libraries on PyPI, in one run.

A read-only `deadline_tool` calls a loopback server over one shared `httpx.AsyncClient`, 8
calls at a time. The server (a `SlowServer` in a process of its own, as a real backend is: in
this process its thread would wait for the GIL) answers the k-th request of call i after
`delays[i][k]`: lognormal (median 20 ms, sigma 0.6), 10x for a share of requests (a straggler).
Every variant replays the same table, so copy 0 of call i takes the same time everywhere and
a hedge draws afresh (a request to another replica). Workloads: 3 % and 5 % stragglers, and
an outage (every request of the middle 40 % of calls 10x: every copy is slow).

Variants: unhedged; our `Hedge` at its defaults (`Hedge(book=LatencyBook())`: the book's p95,
a 5 % budget, a floor of one copy a second that a tool this busy never reaches), the row the
targets are read on, and ours at the peers' README settings (p90, a 10 % budget: the same
load as theirs); `hedge-python` and `httpx-hedged` as their READMEs configure them
(`HedgedHttpxTransport(config=HedgeConfig(estimated_rps=...))` with the measured rate as its
README's tip says, `HedgedTransport()`), then each with `budget_percent=5` (our budget).
Each variant first warms up on 200 calls of another table (every one learns online). Then a
pass measures latency, extra requests and the losers' close at the server (from the winner's
answer written to the loser's connection closed), and a second pass runs every call under a
100 ms deadline (`deadline_scope`): "deadline met" is the share answered inside it, and "its
extra requests" what that pass sent beyond one per call (the load each variant paid for it).
The losers' closes of both passes and both straggler workloads are also pooled per variant
(a few hundred closes: a p99 that is not just the slowest one).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import multiprocessing
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import httpx

from langgraph_deadline import Hedge, deadline_scope, deadline_tool
from langgraph_deadline.learn import LatencyBook
from langgraph_deadline.testing import ServedRequest, SlowServer

from ._common import Check, Section, Table, percentile

__all__ = ["run"]

MEDIAN_S = 0.02
SIGMA = 0.6
CONCURRENCY = 8
MAX_COPIES = 3  # the table holds this many draws per call (a peer may send a request again)
WARM_CALLS = 200
DEADLINE_S = 0.1
MAX_EXTRA = Hedge(after=1.0).max_extra  # our default; the peers' "5 %" rows are held to it
PEERS_MAX_EXTRA = 0.1  # the peers' READMEs' share (p90, 10 %): our row at their settings
OUTAGE = (0.3, 0.7)  # the share of calls, from and to, whose every request is 10x
TARGET_P99_RATIO = 1.5  # hedged p99 / unhedged p95
TARGET_EXTRA_PCT = 5.0
TARGET_CLOSE_MS = 5.0  # loser closed at the server after the winner answered, p99
TARGET_CUT = 0.6  # hedged p99 at least 60 % below unhedged


# -- the server, in a process of its own ---------------------------------------------------------


class _TableServer(SlowServer):
    """`GET /slow?call=i` answers the k-th request of call i after `table[i][k]` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.table: list[list[float]] = []
        self.seen: dict[int, int] = {}

    async def _answer(
        self, req: ServedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if "call" in req.query:
            call = int(req.query["call"])
            k = self.seen.get(call, 0)
            self.seen[call] = k + 1
            row = self.table[call]
            req.query["delay"] = f"{row[min(k, len(row) - 1)]:.6f}"
            req.query["copy"] = str(k)
        return await super()._answer(req, reader, writer)


def _serve(conn: Connection) -> None:
    """The server process: answers `("load", table)` (and forgets what it served),
    `("requests", None)` and `("stop", None)` on `conn`."""
    with _TableServer() as server:
        conn.send(server.port)
        while True:
            what, arg = conn.recv()
            if what == "stop":
                return
            if what == "load":
                server.table, server.seen = arg, {}
                server.requests.clear()
                conn.send(None)
            elif what == "requests":
                conn.send(list(server.requests))


@dataclasses.dataclass(slots=True)
class _Remote:
    conn: Connection
    port: int

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slow"

    def load(self, table: list[list[float]]) -> None:
        self.conn.send(("load", table))
        self.conn.recv()

    def requests(self) -> list[ServedRequest]:
        self.conn.send(("requests", None))
        got: list[ServedRequest] = self.conn.recv()
        return got


@contextmanager
def _server() -> Iterator[_Remote]:
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(there,), daemon=True)
    process.start()
    try:
        if not here.poll(30):
            raise RuntimeError("the benchmark's server did not start")
        yield _Remote(here, here.recv())
        here.send(("stop", None))
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()


# -- workloads ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    name: str
    stragglers: float
    outage: bool = False

    def table(self, n: int, seed: int) -> list[list[float]]:
        rng = random.Random(seed)
        out = []
        for i in range(n):
            down = self.outage and OUTAGE[0] * n <= i < OUTAGE[1] * n
            row = []
            for _ in range(MAX_COPIES):
                value = MEDIAN_S * rng.lognormvariate(0.0, SIGMA)
                row.append(value * 10 if down or rng.random() < self.stragglers else value)
            out.append(row)
        return out


WORKLOADS = (
    Workload("3 % stragglers at 10x", 0.03),
    Workload("5 % stragglers at 10x", 0.05),
    Workload("outage: every request of the middle 40 % of calls 10x", 0.03, outage=True),
)


# -- variants -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Variant:
    """One row: how its tool is made (`hedge`) and how its client's transport is (`transport`,
    given the unhedged rate in calls per second)."""

    name: str
    hedge: Callable[[], Hedge | None] = lambda: None
    transport: Callable[[float], httpx.AsyncBaseTransport | None] = lambda rps: None
    missing: str | None = None  # why this variant cannot run here
    peer: bool = False  # a hedging library's row (not ours, not unhedged)


def _inner() -> httpx.AsyncHTTPTransport:
    return httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=64)
    )


def _ours() -> Hedge:
    return Hedge(book=LatencyBook())  # the defaults: p95, at most 5 % extra (`max_extra`)


def _ours_as_peers() -> Hedge:
    return Hedge(book=LatencyBook(), quantile=0.9, max_extra=PEERS_MAX_EXTRA)


def _variants() -> list[Variant]:
    """Unhedged, ours at its defaults (the row the targets are read on), ours at the peers'
    README settings (p90, 10 %: the same load as theirs), then the peers."""
    ours = [
        Variant("unhedged"),
        Variant("ours: Hedge(book), defaults: p95, 5 %", hedge=_ours),
        Variant("ours at the peers' settings: p90, 10 %", hedge=_ours_as_peers),
    ]
    return ours + _peer("hedge-python", _hedge_python) + _peer("httpx-hedged", _httpx_hedged)


def _peer(name: str, rows: Callable[[], list[Variant]]) -> list[Variant]:
    """A peer's rows, or one saying why it cannot run here."""
    try:
        return rows()
    except ImportError as e:
        return [Variant(name, missing=f"{name} is not installed ({e}): make bench installs it")]


def _hedge_python() -> list[Variant]:
    from hedge import HedgeConfig
    from hedge.transport import HedgedHttpxTransport

    def made(**config: Any) -> Callable[[float], httpx.AsyncBaseTransport]:
        # its README's tip: `estimated_rps` close to the real rate (the unhedged pass's)
        return lambda rps: HedgedHttpxTransport(_inner(), HedgeConfig(estimated_rps=rps, **config))

    return [
        Variant("hedge-python 0.3 (README: p90, budget 10 %)", transport=made(), peer=True),
        Variant(
            "hedge-python 0.3 (p90, budget 5 %)",
            transport=made(budget_percent=100 * MAX_EXTRA),
            peer=True,
        ),
    ]


def _httpx_hedged() -> list[Variant]:
    from httpx_hedged import HedgeConfig, HedgedTransport

    def made(**config: Any) -> Callable[[float], httpx.AsyncBaseTransport]:
        return lambda rps: HedgedTransport(_inner(), HedgeConfig(**config))

    return [
        Variant(
            "httpx-hedged 0.5 (README: p90, budget 10 %, breaker)", transport=made(), peer=True
        ),
        Variant(
            "httpx-hedged 0.5 (p90, budget 5 %, breaker)",
            transport=made(budget_percent=100 * MAX_EXTRA),
            peer=True,
        ),
    ]


# -- one variant on one workload ------------------------------------------------------------------


def _tool(client: httpx.AsyncClient, url: str, hedge: Hedge | None) -> Any:
    async def search(call: int) -> str:
        """Search the catalogue."""
        text = (await client.get(url, params={"call": call})).text
        return text

    return deadline_tool(search, cap=5.0, read_only=True, hedge=hedge)


async def _pass(tool: Any, n: int, deadline: float | None) -> tuple[list[float], int]:
    """Per-call latency (s) of `n` calls, `CONCURRENCY` at a time, and how many answered
    (inside `deadline`, when given)."""
    latencies = [0.0] * n
    queue = iter(range(n))
    met = 0

    async def worker() -> None:
        nonlocal met
        for i in queue:
            call = {"type": "tool_call", "id": f"c{i}", "name": "search", "args": {"call": i}}
            t0 = time.perf_counter()
            with deadline_scope(deadline):
                message = await tool.ainvoke(call)
            latencies[i] = time.perf_counter() - t0
            if message.status == "success" and (deadline is None or latencies[i] <= deadline):
                met += 1

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return latencies, met


@dataclasses.dataclass(slots=True)
class Got:
    latencies: list[float]
    extra: int  # requests beyond one per call
    extra_outage: tuple[int, int]  # during the outage, its second half
    closing: list[float]  # ms, each loser's close at the server after the winner's answer
    met: float | None  # % answered inside the deadline
    met_extra: int | None  # requests beyond one per call in the deadline's pass
    seconds: float


def _closing_ms(requests: list[ServedRequest]) -> list[float]:
    by_call: dict[str, list[ServedRequest]] = {}
    for r in requests:
        by_call.setdefault(r.query["call"], []).append(r)
    out = []
    for copies in by_call.values():
        won = [r.answered for r in copies if r.answered is not None]
        lost = [r.disconnected for r in copies if r.disconnected is not None]
        if won and lost:
            out += [(gone - min(won)) * 1000.0 for gone in lost]
    return out


async def _one(variant: Variant, workload: Workload, server: _Remote, n: int, rps: float) -> Got:
    hedge = variant.hedge()
    transport = variant.transport(rps)
    async with httpx.AsyncClient(transport=transport or _inner()) as client:
        tool = _tool(client, server.url(), hedge)
        server.load(workload.table(WARM_CALLS, seed=99))
        await _pass(tool, WARM_CALLS, None)
        server.load(workload.table(n, seed=7))
        t0 = time.perf_counter()
        latencies, _ = await _pass(tool, n, None)
        seconds = time.perf_counter() - t0
        await asyncio.sleep(0.2)  # the last losers' closes reach the server
        requests = server.requests()
        closing = _closing_ms(requests)
        met = met_extra = None
        if not workload.outage:
            server.load(workload.table(n, seed=7))
            _, answered_in_time = await _pass(tool, n, DEADLINE_S)
            met = 100.0 * answered_in_time / n
            await asyncio.sleep(0.2)
            deadline_requests = server.requests()
            met_extra = len(deadline_requests) - n
            closing += _closing_ms(deadline_requests)
    lo, hi = int(OUTAGE[0] * n), int(OUTAGE[1] * n)
    mid = (lo + hi) // 2
    counts = [0] * n
    for r in requests:
        counts[int(r.query["call"])] += 1
    return Got(
        latencies=latencies,
        extra=len(requests) - n,
        extra_outage=(sum(counts[lo:hi]) - (hi - lo), sum(counts[mid:hi]) - (hi - mid)),
        closing=closing,
        met=met,
        met_extra=met_extra,
        seconds=seconds,
    )


# -- the report -----------------------------------------------------------------------------------


def _ms(values: list[float], p: float) -> str:
    return f"{percentile(values, p) * 1000:.1f}"


async def _run(n: int) -> tuple[list[Table], list[Check], list[tuple[str, str]]]:
    variants = _variants()
    tables: list[Table] = []
    checks: list[Check] = []
    figures: list[tuple[str, str]] = []
    closes: dict[str, list[float]] = {}  # per variant, over the straggler workloads' passes
    gc.collect()
    gc.freeze()  # the imports' objects leave the heap a full collection walks (60-100 ms)
    try:
        with _server() as server:
            for workload in WORKLOADS:
                got: dict[str, Got] = {}
                rps = 0.0
                for v in variants:
                    if v.missing is None:
                        got[v.name] = await _one(v, workload, server, n, rps)
                        if not rps:
                            rps = n / got[v.name].seconds
                        if not workload.outage:
                            closes.setdefault(v.name, []).extend(got[v.name].closing)
                table, more_checks, more_figures = _report(workload, variants, got, n)
                tables.append(table)
                checks += more_checks
                figures += more_figures
    finally:
        gc.unfreeze()
    table, check = _closes(variants, closes)
    return [*tables, table], [*checks, check], figures


def _closes(variants: list[Variant], closes: dict[str, list[float]]) -> tuple[Table, Check]:
    """The losers' closes pooled over both straggler workloads and both passes: a p99 of a
    few hundred closes, where one pass's (a few dozen) is in effect its slowest one."""
    table = Table(
        "Losers closed at the server after the winner's answer, pooled over both straggler "
        "workloads and both passes (ms)",
        ("variant", "closes", "p50", "p90", "p99", "max"),
    )
    for v in variants[1:]:
        got = sorted(closes.get(v.name, []))
        if got:
            at = [f"{percentile(got, p):.1f}" for p in (50, 90, 99)]
            table.add(v.name, str(len(got)), *at, f"{got[-1]:.1f}")
    ours = closes.get(variants[1].name) or [float("nan")]
    check = Check(
        "hedge: loser closed after the winner p99 (pooled)",
        percentile(ours, 99),
        TARGET_CLOSE_MS,
        " ms",
    )
    return table, check


def _report(
    workload: Workload, variants: list[Variant], got: dict[str, Got], n: int
) -> tuple[Table, list[Check], list[tuple[str, str]]]:
    headers: tuple[str, ...]
    if workload.outage:
        headers = ("variant", "p50", "p99", "extra requests", "in the outage", "its 2nd half")
    else:
        headers = (
            "variant",
            "p50",
            "p95",
            "p99",
            "extra requests",
            "loser closed p99",
            f"deadline {DEADLINE_S * 1000:.0f} ms met",
            "its extra requests",
        )
    table = Table(f"Hedging, {n} calls, {workload.name} (ms)", headers)
    lo, hi = int(OUTAGE[0] * n), int(OUTAGE[1] * n)
    for v in variants:
        if v.missing is not None:
            table.notes.append(f"{v.name}: not run: {v.missing}")
            continue
        g = got[v.name]
        lat = g.latencies
        extra = f"{100.0 * g.extra / n:.1f} %"
        if workload.outage:
            during = f"{100.0 * g.extra_outage[0] / (hi - lo):.1f} %"
            late = f"{100.0 * g.extra_outage[1] / (hi - (lo + hi) // 2):.1f} %"
            table.add(v.name, _ms(lat, 50), _ms(lat, 99), extra, during, late)
            continue
        close = "-" if not g.closing else f"{percentile(g.closing, 99):.1f}"
        met = f"{g.met:.1f} %"
        met_extra = f"{100.0 * (g.met_extra or 0) / n:.1f} %"
        table.add(v.name, _ms(lat, 50), _ms(lat, 95), _ms(lat, 99), extra, close, met, met_extra)
    checks: list[Check] = []
    figures: list[tuple[str, str]] = []
    plain = got["unhedged"].latencies
    ours = got[variants[1].name]
    short = workload.name.split(":")[0]
    if workload.outage:
        share = 100.0 * ours.extra_outage[0] / (hi - lo)
        checks.append(
            Check(f"hedge {short}: extra requests in the outage", share, 100 * MAX_EXTRA, " %")
        )
        return table, checks, figures
    p99 = percentile(ours.latencies, 99)
    figures.append(
        (
            f"hedge p99, {short} (unhedged -> ours)",
            f"{_ms(plain, 99)} -> {_ms(ours.latencies, 99)} ms",
        )
    )
    checks += [
        Check(
            f"hedge {short}: ours p99 / unhedged p95",
            p99 / percentile(plain, 95),
            TARGET_P99_RATIO,
            "x",
        ),
        Check(
            f"hedge {short}: ours p99 / unhedged p99",
            p99 / percentile(plain, 99),
            1 - TARGET_CUT,
            "x",
        ),
        Check(
            f"hedge {short}: ours extra requests", 100.0 * ours.extra / n, TARGET_EXTRA_PCT, " %"
        ),
    ]
    peers = {v.name: got[v.name] for v in variants if v.peer and v.name in got}
    for row, load in ((ours, TARGET_EXTRA_PCT), (got.get(variants[2].name), 100 * PEERS_MAX_EXTRA)):
        if row is not None:
            checks += _against_peers(short, row, peers, load, n)
    return table, checks, figures


def _against_peers(
    short: str, ours: Got, peers: dict[str, Got], load: float, n: int
) -> list[Check]:
    """Ours against the peers that paid no more than `load` % extra requests: p99 (the first
    pass's load) and "deadline met" (the deadline pass's)."""
    out = []
    p99s = [percentile(g.latencies, 99) for g in peers.values() if 100.0 * g.extra / n <= load]
    if p99s:
        out.append(
            Check(
                f"hedge {short}: ours p99 / best peer's at <= {load:g} %",
                percentile(ours.latencies, 99) / min(p99s),
                1.0,
                "x",
            )
        )
    mets = [
        g.met
        for g in peers.values()
        if g.met is not None and 100.0 * (g.met_extra or 0) / n <= load
    ]
    if mets and ours.met is not None:
        out.append(
            Check(
                f"hedge {short}: deadline met, best peer's at <= {load:g} % extra - ours",
                max(mets) - ours.met,
                0.0,
                " points",
            )
        )
    return out


def run(*, quick: bool = False) -> Section:
    n = 400 if quick else 1500
    tables, checks, figures = asyncio.run(_run(n))
    section = Section(tables=tables)
    section.checks += checks
    section.figures += figures
    return section
