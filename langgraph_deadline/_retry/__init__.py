"""Deadline-aware retries and tenacity adaptors."""
