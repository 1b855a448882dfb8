"""Tools to prove cancellation in your own graphs: a manual clock and loopback servers that report
what they saw (was the connection closed? when?)."""

from .._clock import ManualClock
from ._slow_server import ServedRequest, SlowServer

__all__ = ["ManualClock", "ServedRequest", "SlowServer"]
