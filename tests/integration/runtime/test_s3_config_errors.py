"""An S3 client its configuration makes fail (issue 36.13) fails at once, saying what to fix,
against a real S3 API server (moto): credentials encoded in AWS_ENDPOINT_URL made aiohttp
refuse every request ("Cannot combine AUTHORIZATION header ... credentials encoded in URL"),
and that was retried PERDURE_S3_ATTEMPTS times as a transient error."""

from __future__ import annotations

import logging

import pytest
from tests.helpers.s3server import S3

from perdure.runtime.s3.client import S3Client

PASSWORD = "endpoint-password-0123456789"


def test_credentials_in_the_endpoint_url_fail_at_once_without_retries(
        s3: S3, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    endpoint = s3.env["AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint.replace("http://", f"http://me:{PASSWORD}@"))
    monkeypatch.setenv("PERDURE_S3_BACKOFF_S", "0.5")  # each retry would cost seconds
    caplog.set_level(logging.WARNING, logger="perdure.s3")
    with pytest.raises(OSError) as err:  # retry.ConfigError
        S3Client().put_bytes(f"{s3.bucket}/run/x", b"state")
    assert type(err.value).__name__ == "ConfigError", err.value
    message = str(err.value)
    assert message.startswith(f"put_object {s3.bucket}/run/x: ") and "not retried" in message
    assert "AWS_ENDPOINT_URL" in message and PASSWORD not in message
    assert not [r for r in caplog.records if "try 2 of" in r.getMessage()]
    assert not s3.proxy.seen  # nothing reached the server


def test_the_same_server_without_credentials_in_the_url_works(s3: S3) -> None:
    client = S3Client()
    client.put_bytes(f"{s3.bucket}/run/x", b"state")
    assert client.head(f"{s3.bucket}/run/x") is not None
