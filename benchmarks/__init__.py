"""Benchmarks for langgraph-deadline: run them all with `python -m benchmarks` (`--quick`: short).

- `overhead`: what wrapping a graph with `with_deadlines` costs a run of trivial nodes, async and
  sync, against the bare compiled graph measured in the same process, interleaved.
- `overshoot`: how late a run whose nodes hang returns after its deadline, with 200 runs in
  flight at once, against naive per-node `asyncio.wait_for` timeouts.

Every figure is a comparison made in one run, so it is printed as a ratio or a difference, never
as an absolute number to compare across machines.
"""

from __future__ import annotations

__all__ = ["overhead", "overshoot"]
