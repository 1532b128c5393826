"""Retries for object-store calls: which errors are worth another try, and how long to wait.

Transient: 5xx answers, timeouts, throttling and dropped connections; anything else is raised
at once. Waits grow exponentially to a cap with full jitter, so ranks throttled together do not
retry in step: PERDURE_S3_ATTEMPTS (default 6), PERDURE_S3_BACKOFF_S (the first wait's ceiling,
default 0.2), PERDURE_S3_BACKOFF_CAP_S (default 5).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.client import IncompleteRead
from typing import TypeVar

from perdure.secrecy import redact

log = logging.getLogger("perdure.s3")
_T = TypeVar("_T")

TRANSIENT_CODES = frozenset({
    "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling",
    "ThrottlingException", "RequestTimeTooSkewed", "500", "502", "503", "504",
})


class GaveUp(OSError):
    """A call that kept failing transiently until its tries ran out."""


class ConfigError(OSError):
    """A call the client's configuration makes fail every time: never retried."""


@dataclass(frozen=True)
class RetryPolicy:
    """How many tries a call gets and how the waits between them grow."""

    attempts: int = 6
    base_s: float = 0.2
    cap_s: float = 5.0

    def wait(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``failures`` failed tries."""
        return float(rand() * min(self.cap_s, self.base_s * 2.0 ** max(0, failures - 1)))

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """The policy the environment sets (module docstring)."""
        return cls(
            attempts=positive_int("PERDURE_S3_ATTEMPTS", cls.attempts),
            base_s=_number("PERDURE_S3_BACKOFF_S", cls.base_s),
            cap_s=_number("PERDURE_S3_BACKOFF_CAP_S", cls.cap_s),
        )


def _number(name: str, default: float, *, integer: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = -1
    if value < (1 if integer else 0):
        kind = "an integer >= 1" if integer else "a number of seconds >= 0"
        raise ValueError(f"{name}={raw!r}: use {kind}, or unset it for the default ({default})")
    return value


def positive_int(name: str, default: int) -> int:
    """The integer >= 1 in environment variable ``name`` (``default`` when unset)."""
    return int(_number(name, default, integer=True))


def _code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    error = response.get("Error") or {}
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    code = error.get("Code")
    if code is None and status is not None:
        code = str(status)
    return None if code is None else str(code)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def misconfigured(exc: BaseException) -> bool:
    """Whether the client refused its own request (a bad endpoint): looks transient, is not."""
    return any(isinstance(e, ValueError | TypeError) and not isinstance(e, OSError)
               for e in _chain(exc)[1:])


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is worth another try."""
    if misconfigured(exc):
        return False
    for e in _chain(exc):
        if isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError):
            return False
        code = _code(e)
        if code is not None:
            return code in TRANSIENT_CODES or code.startswith("5")
        if isinstance(e, ConnectionError | TimeoutError | socket.timeout | IncompleteRead
                      | asyncio.TimeoutError | EOFError):
            return True
        module = type(e).__module__
        if module.startswith(("aiohttp", "botocore", "urllib3")) and any(
            word in type(e).__name__ for word in
            ("Connect", "Connection", "Timeout", "Disconnected", "Payload", "ReadError",
             "ResponseParser", "IncompleteRead", "HTTPClientError")):
            return True
    return False


def describe(exc: BaseException) -> str:
    """The error as one line: type, the server's code, the first line of its text (redacted)."""
    code = next((c for c in map(_code, _chain(exc)) if c is not None), None)
    text = redact((str(exc).strip().splitlines() or [""])[0])[:300]
    return f"{type(exc).__name__}{f' ({code})' if code else ''}: {text}"


def call(what: str, fn: Callable[[], _T], policy: RetryPolicy) -> _T:
    """``fn()``, tried again after transient errors; GaveUp when the tries run out."""
    failures = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            failures += 1
            if misconfigured(exc):
                raise ConfigError(f"{what}: {describe(exc)}: the S3 client's configuration "
                                  "makes every try fail, so it is not retried; check "
                                  "AWS_ENDPOINT_URL (credentials go in AWS_ACCESS_KEY_ID/"
                                  "AWS_SECRET_ACCESS_KEY or AWS_PROFILE, never in the URL)"
                                  ) from exc
            if not transient(exc):
                raise
            if failures >= policy.attempts:
                raise GaveUp(f"{what}: {describe(exc)}; gave up after {failures} tries "
                             "(PERDURE_S3_ATTEMPTS)") from exc
            pause = policy.wait(failures)
            log.warning("%s: %s; try %d of %d in %.2fs", what, describe(exc), failures + 1,
                        policy.attempts, pause)
            time.sleep(pause)
