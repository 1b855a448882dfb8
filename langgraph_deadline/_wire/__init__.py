"""The deadline over HTTP: the wire format, httpx hooks out, ASGI middleware in."""
