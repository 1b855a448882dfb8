"""The observers a process gets unless it calls `set_observers`: LangChain callbacks, plus the
backends named in `LANGGRAPH_DEADLINE_INSTRUMENT`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Final

from .._core.extras import install_hint
from .._core.observe import INSTRUMENT_ENV, Observer

__all__ = ["default_observers"]

log = logging.getLogger("langgraph_deadline")


def _otel() -> Observer:
    from .otel import OtelObserver

    return OtelObserver()


def _prometheus() -> Observer:
    from .prometheus import PrometheusObserver

    return PrometheusObserver()


_BACKENDS: Final[dict[str, tuple[Callable[[], Observer], str]]] = {
    "otel": (_otel, "otel"),
    "opentelemetry": (_otel, "otel"),
    "prometheus": (_prometheus, "prometheus"),
}


def default_observers() -> tuple[Observer, ...]:
    """LangChain callbacks, plus the backends named in `LANGGRAPH_DEADLINE_INSTRUMENT`.

    The callbacks send only what the deadline did (`CallbacksObserver(deadline_only=True)`),
    unless `callbacks` is named: a graph with time to spare sends its handlers nothing new.

    OpenTelemetry and Prometheus are opt-in even when installed: creating spans and registering
    metrics in the global registry of an application that did not ask for them would surprise
    it. A named backend that is not installed, or an unknown name, is logged and left out.
    """
    names = [n.strip().lower() for n in os.environ.get(INSTRUMENT_ENV, "").split(",")]
    explicit = set(names)
    names = [n for n in dict.fromkeys(names) if n and n != "callbacks"]
    if {"off", "none"} & set(names):
        return ()
    from .callbacks import CallbacksObserver

    found: list[Observer] = [CallbacksObserver(deadline_only="callbacks" not in explicit)]
    started: set[str] = set()
    for name in names:
        backend = _BACKENDS.get(name)
        if backend is not None and backend[1] in started:
            continue  # "otel,opentelemetry": one backend
        if backend is None:
            log.warning(
                "%s: unknown backend %r (known: otel, prometheus, off)", INSTRUMENT_ENV, name
            )
            continue
        factory, extra = backend
        started.add(extra)
        try:
            found.append(factory())
        except ImportError:
            log.warning(
                "%s names %r, which is not installed: %s", INSTRUMENT_ENV, name, install_hint(extra)
            )
        except Exception:
            log.warning("%s: could not start the %r backend", INSTRUMENT_ENV, name, exc_info=True)
    return tuple(found)
