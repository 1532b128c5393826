"""Fixtures for the `perdure serve` tests (helpers in serve_harness.py)."""

from serve_harness import server

__all__ = ["server"]
