"""Who may talk to `perdure serve`: the state dir's API token, sessions, cross-site checks.

- The token lives in `<state dir>/api-token`, created once with mode 0600 (a file anyone else
  can read is refused: the token is the only key to the API).
- A request is authenticated by `Authorization: Bearer <token>` or by the dashboard's session
  cookie, which the login form sets: `<nonce>.<hmac(token, nonce)>`, so it holds no secret,
  survives a server restart, and every session ends when the token file is replaced.
- A state-changing request (POST) that rides on the cookie must come from the dashboard
  itself: same origin (Origin / Sec-Fetch-Site) and the custom header the dashboard's
  script sends, which a cross-site form cannot set. A bearer token is never sent by a browser
  on its own, so bearer requests need no such check.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TOKEN_FILE = "api-token"
COOKIE = "perdure_session"
CSRF_HEADER = "x-perdure-csrf"  # the dashboard's script sends it on every POST


class TokenError(RuntimeError):
    """The token file cannot be used; the message says why and what to do."""


def load_or_create_token(state_dir: Path) -> str:
    """The API token of a state dir, created (mode 0600) on first use."""
    path = state_dir / TOKEN_FILE
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_token(path)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return _read_token(path)


def _read_token(path: Path) -> str:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(f"{path} is readable by others (mode {stat.S_IMODE(mode):o}); "
                         f"run `chmod 600 {path}` or delete it to get a new token")
    token = path.read_text().strip()
    if len(token) < 16:
        raise TokenError(f"{path} holds no usable token (under 16 characters); delete it and "
                         "start `perdure serve` again to get a new one")
    return token


@dataclass(frozen=True)
class Auth:
    """Checks requests against one token."""

    token: str

    def session_cookie(self) -> str:
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{self._sign(nonce)}"

    def _sign(self, nonce: str) -> str:
        return hmac.new(self.token.encode(), f"session:{nonce}".encode(),
                        hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def cookie_ok(self, value: str) -> bool:
        nonce, _, mac = value.partition(".")
        return bool(nonce) and hmac.compare_digest(mac.encode(), self._sign(nonce).encode())

    def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
        """'bearer', 'cookie', or None when the request carries no valid credential."""
        authz = headers.get("authorization", "")
        scheme, _, given = authz.partition(" ")
        if scheme.lower() == "bearer" and self.token_ok(given.strip()):
            return "bearer"
        cookie = cookies.get(COOKIE)
        if cookie and self.cookie_ok(cookie):
            return "cookie"
        return None


def cross_site(headers: Mapping[str, str], host: str) -> str | None:
    """Why a cookie-authenticated POST is refused as cross-site, or None when it is not."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    origin = headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != host:
        return f"cross-site request refused (Origin {origin} is not this server)"
    if headers.get(CSRF_HEADER) != "1":
        return (f"a state-changing request with the session cookie needs the {CSRF_HEADER} "
                "header (the dashboard sends it); scripts use `Authorization: Bearer <token>`")
    return None
