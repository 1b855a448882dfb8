"""Graphs deployed on LangGraph Server (`langgraph.json` beside this file): one deadline per
request, from the request's headers and counting its time in the queue, and a stale cache over
the server's own store. docs/howto/across-services.md, "Deploy on LangGraph Server", walks
through it; tests/wire/test_served.py serves it with `langgraph dev`."""
