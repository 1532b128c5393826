"""The S3 retry policy: which errors get another try, and the waits between tries."""

from __future__ import annotations

import pytest

from perdure.runtime.s3 import retry
from perdure.runtime.s3.retry import GaveUp, RetryPolicy


class _ClientError(Exception):
    """What botocore raises: the server's answer in `response`."""

    def __init__(self, code: str, status: int) -> None:
        super().__init__(f"An error occurred ({code})")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


def _wrapped(inner: Exception) -> OSError:
    """As s3fs translates it: an OSError caused by the client error."""
    try:
        raise OSError(16, "Please reduce your request rate.") from inner
    except OSError as exc:
        return exc


@pytest.mark.parametrize(("exc", "expected"), [
    (_ClientError("SlowDown", 503), True),
    (_wrapped(_ClientError("SlowDown", 503)), True),
    (_ClientError("InternalError", 500), True),
    (_ClientError("NoSuchBucket", 404), False),
    (_ClientError("AccessDenied", 403), False),
    (ConnectionResetError(104, "reset"), True),
    (TimeoutError(), True),
    (FileNotFoundError("no such key"), False),
    (ValueError("a bug"), False),
])
def test_transient_errors_are_the_servers_5xx_and_dropped_connections(
    exc: Exception, expected: bool,
) -> None:
    assert retry.transient(exc) is expected


def test_waits_are_jittered_under_an_exponential_ceiling() -> None:
    policy = RetryPolicy(attempts=6, base_s=0.2, cap_s=1.0)
    assert [policy.wait(n, lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.wait(3, lambda: 0.0) == 0.0  # full jitter: anywhere from nothing up


def test_call_retries_transient_errors_then_gives_up_naming_the_call() -> None:
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise _ClientError("SlowDown", 503)
        return "ok"

    fast = RetryPolicy(attempts=3, base_s=0.0, cap_s=0.0)
    assert retry.call("put x", flaky, fast) == "ok" and len(tries) == 3

    def down() -> None:
        raise ConnectionRefusedError(111, "refused")

    with pytest.raises(GaveUp, match=r"put y: ConnectionRefusedError: .*gave up after 3 tries"):
        retry.call("put y", down, fast)
    with pytest.raises(FileNotFoundError):  # an answer, not a fault: raised at once
        retry.call("get z", lambda: (_ for _ in ()).throw(FileNotFoundError("z")), fast)


def test_bad_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_S3_ATTEMPTS", "0")
    with pytest.raises(ValueError, match=r"PERDURE_S3_ATTEMPTS='0': use an integer >= 1"):
        RetryPolicy.from_env()
    monkeypatch.setenv("PERDURE_S3_ATTEMPTS", "4")
    monkeypatch.setenv("PERDURE_S3_BACKOFF_S", "soon")
    with pytest.raises(ValueError, match="PERDURE_S3_BACKOFF_S='soon'"):
        RetryPolicy.from_env()


def _client_error_over(inner: Exception) -> Exception:
    """What botocore raises when its HTTP client (aiohttp) raised `inner` before sending (the
    s3 extra's; a venv without it, as the compat matrix's torch cells, skips)."""
    HTTPClientError = pytest.importorskip("botocore.exceptions").HTTPClientError

    try:
        raise HTTPClientError(error=inner) from inner
    except HTTPClientError as exc:
        return exc


@pytest.mark.parametrize(("inner", "expected"), [
    (ValueError("Cannot combine AUTHORIZATION header with AUTH argument or credentials "
                "encoded in URL"), False),
    (TypeError("bad header value"), False),
    (ConnectionResetError(104, "reset"), True),
])
def test_a_client_its_configuration_makes_fail_is_not_transient(
        inner: Exception, expected: bool) -> None:
    assert retry.transient(_client_error_over(inner)) is expected


def test_call_raises_a_configuration_error_at_once_saying_what_to_check() -> None:
    tries: list[int] = []

    def refused() -> None:
        tries.append(1)
        raise _client_error_over(ValueError("credentials encoded in URL http://u:pw@host"))

    with pytest.raises(retry.ConfigError, match="AWS_ENDPOINT_URL") as err:
        retry.call("put x", refused, RetryPolicy(attempts=6, base_s=0.0, cap_s=0.0))
    assert len(tries) == 1 and "pw@" not in str(err.value)
