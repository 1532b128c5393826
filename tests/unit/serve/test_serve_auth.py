"""The API token file, session cookies and the cross-site checks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from perdure.serve.auth import (
    MAX_SESSIONS,
    Auth,
    TokenError,
    cross_site,
    load_or_create_token,
    token_path,
)


def test_token_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path / "state")
    path = tmp_path / "state" / "api-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) >= 32
    assert load_or_create_token(tmp_path / "state") == token
    os.chmod(path, 0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        load_or_create_token(tmp_path / "state")


def test_sessions_live_in_the_server_and_end_on_logout() -> None:
    now = [0.0]
    auth = Auth("t" * 40, clock=lambda: now[0], session_seconds=60)
    cookie = auth.new_session()
    assert "t" * 40 not in cookie and auth.cookie_ok(cookie)
    assert not Auth("t" * 40).cookie_ok(cookie)  # no other server (or restart) knows it
    assert not auth.cookie_ok(cookie + "x")
    assert auth.identify({"authorization": "Bearer " + "t" * 40}, {}) == "bearer"
    assert auth.identify({"authorization": "Basic " + "t" * 40}, {}) is None
    assert auth.identify({}, {"perdure_session": cookie}) == "cookie"
    auth.end_session(cookie)
    assert not auth.cookie_ok(cookie)
    other = auth.new_session()
    now[0] = 61
    assert not auth.cookie_ok(other)  # expired


def test_sessions_are_capped_oldest_first() -> None:
    auth = Auth("t" * 40)
    first = auth.new_session()
    rest = [auth.new_session() for _ in range(MAX_SESSIONS)]
    assert not auth.cookie_ok(first) and all(auth.cookie_ok(s) for s in rest[-5:])


def test_a_replaced_token_file_retires_the_old_token_and_every_session(tmp_path: Path) -> None:
    old = load_or_create_token(tmp_path)
    auth = Auth(old, token_path(tmp_path))
    cookie = auth.new_session()
    assert auth.token_ok(old) and auth.cookie_ok(cookie)
    new = "n" * 43
    tmp = tmp_path / "new-token"
    tmp.write_text(new + "\n")
    tmp.chmod(0o600)
    tmp.replace(token_path(tmp_path))
    assert not auth.token_ok(old) and not auth.cookie_ok(cookie) and auth.token_ok(new)
    token_path(tmp_path).unlink()  # no token file: nothing gets in
    assert not auth.token_ok(new) and auth.identify({"authorization": f"Bearer {new}"}, {}) is None


@pytest.mark.parametrize(("headers", "refused"), [
    ({"x-perdure-csrf": "1", "origin": "http://h:1", "sec-fetch-site": "same-origin"}, False),
    ({"x-perdure-csrf": "1"}, False),
    ({}, True),
    ({"x-perdure-csrf": "1", "origin": "http://evil:1"}, True),
    ({"x-perdure-csrf": "1", "origin": "null"}, True),
    ({"x-perdure-csrf": "1", "sec-fetch-site": "same-site"}, True),
])
def test_cross_site_posts_are_refused(headers: dict[str, str], refused: bool) -> None:
    assert (cross_site(headers, "h:1") is not None) == refused


def test_the_cli_does_not_import_the_web_stack() -> None:
    code = "import sys, perdure.cli.main; print(sorted({'fastapi', 'uvicorn'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
