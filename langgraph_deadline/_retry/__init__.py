"""Deadline-aware retries and tenacity adaptors.

`policy` (the settings, `on=` as a predicate), `retry_after` (a server's `Retry-After`), `call`
(one call's attempts and the decisions between them), `retry` (the decorator and its loops),
`tenacity` (adaptors for tenacity loops).
"""
