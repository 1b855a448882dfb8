"""Observer backends: LangChain callbacks, OpenTelemetry, Prometheus, JSON lines."""
