"""The core: the `Deadline` value, the deadline and cancel signal in context, one step's
plan/run/record, errors, records, clocks, validation, worker threads and observer hooks.

Imports neither LangChain nor LangGraph (a test keeps it so)."""
