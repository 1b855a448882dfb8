"""Tools: `deadline_tool`, model-readable timeouts, stale caches."""
