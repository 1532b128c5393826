import secrets
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.s3server import S3, FaultProxy, MotoServer, make_bucket

# A shell without job control starts `pytest ... &` with SIGINT ignored, and every process a test
# starts would inherit that: the tests that stop a controller with Ctrl-C (SIGINT) would wait
# for it in vain. Python's own handler is reset to the default at exec, so children get Ctrl-C.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _s3_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "AKIAPERDURE" + secrets.token_hex(5).upper(),
        "AWS_SECRET_ACCESS_KEY": "perdure-secret-" + secrets.token_hex(16),
        "AWS_DEFAULT_REGION": "us-east-1",
        # Quick retries, so that a save that fails for good does so in about a second.
        "PERDURE_S3_ATTEMPTS": "5",
        "PERDURE_S3_BACKOFF_S": "0.05",
        "PERDURE_S3_BACKOFF_CAP_S": "0.3",
    }


def _bucket_env(server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    bucket = f"perdure-{uuid.uuid4().hex[:12]}"
    make_bucket(server.endpoint, bucket)
    proxy = FaultProxy(server.port, on_kill=server.kill)
    env = _s3_env(proxy.endpoint)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE",
                 "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        yield S3(server, proxy, bucket, env)
    finally:
        proxy.close()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto S3 server for the session (its own venv, 127.0.0.1, a free port)."""
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def s3(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """A fresh bucket on the session's server, the AWS env pointing at a fault proxy."""
    yield from _bucket_env(moto_server, monkeypatch)


@pytest.fixture
def s3_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """Like `s3`, on a server of this test's own (which the test may kill and start again)."""
    server = MotoServer(tmp_path / "moto.log")
    server.start()
    try:
        yield from _bucket_env(server, monkeypatch)
    finally:
        server.kill()
