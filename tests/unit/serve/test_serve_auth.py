"""The API token file, session cookies and the cross-site checks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from perdure.serve.auth import Auth, TokenError, cross_site, load_or_create_token


def test_token_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    token = load_or_create_token(tmp_path / "state")
    path = tmp_path / "state" / "api-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) >= 32
    assert load_or_create_token(tmp_path / "state") == token
    os.chmod(path, 0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        load_or_create_token(tmp_path / "state")


def test_sessions_are_signed_with_the_token() -> None:
    auth = Auth("t" * 40)
    cookie = auth.session_cookie()
    assert "t" * 40 not in cookie and auth.cookie_ok(cookie)
    assert not Auth("u" * 40).cookie_ok(cookie)  # a new token ends every session
    nonce, _, mac = cookie.partition(".")
    assert not auth.cookie_ok(f"{nonce}x.{mac}") and not auth.cookie_ok(nonce)
    assert auth.identify({"authorization": "Bearer " + "t" * 40}, {}) == "bearer"
    assert auth.identify({"authorization": "Basic " + "t" * 40}, {}) is None
    assert auth.identify({}, {"perdure_session": cookie}) == "cookie"


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
