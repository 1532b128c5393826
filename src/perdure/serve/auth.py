"""Who may talk to `perdure serve`: the state dir's API token, sessions, cross-site checks.

- The token is `<state dir>/api-token` (0600; one others can read is refused). Replacing or
  deleting the file retires the token and ends every session at once.
- A request carries `Authorization: Bearer <token>` or the login form's session cookie (a
  random id whose hash the server keeps in memory).
- A POST riding on the cookie must come from the dashboard: same origin and the custom header
  its script sends, which a cross-site form cannot set. Bearer requests need no such check.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from perdure import statedir
from perdure.store.files import make_state_dir

COOKIE = "perdure_session"
CSRF_HEADER = "x-perdure-csrf"  # the dashboard's script sends it on every POST
SESSION_SECONDS = 7 * 86400
MAX_SESSIONS = 1000  # logins kept at once; the oldest ends first


class TokenError(RuntimeError):
    """The token file cannot be used; the message says why and what to do."""


def token_path(state_dir: Path) -> Path:
    return state_dir / statedir.TOKEN


def load_or_create_token(state_dir: Path) -> str:
    """The API token of a state dir, created (0600, in a state dir made private) on first use."""
    path = token_path(state_dir)
    make_state_dir(state_dir)
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


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


def _key(session: str) -> str:
    return hashlib.sha256(session.encode()).hexdigest()


class Auth:
    """Checks requests against the token (followed in `path` when given) and keeps sessions;
    thread-safe."""

    def __init__(self, token: str, path: Path | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 session_seconds: float = SESSION_SECONDS) -> None:
        self.path, self.clock, self.session_seconds = path, clock, session_seconds
        self._token: str | None = token
        self._stamp = _stamp(path) if path is not None else None
        self._sessions: dict[str, float] = {}  # sha256 of a session id -> when it expires
        self._lock = threading.Lock()

    def current(self) -> str | None:
        """The token in force: the file's, re-read when it changed; None when it is unusable."""
        if self.path is None:
            return self._token
        stamp = _stamp(self.path)
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    token: str | None = _read_token(self.path)
                except (OSError, TokenError):
                    token = None
                if token != self._token:
                    self._token = token
                    self._sessions.clear()  # a new token ends every session
            return self._token

    def new_session(self) -> str:
        session = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._sessions = {k: t for k, t in self._sessions.items() if t > now}
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[_key(session)] = now + self.session_seconds
        return session

    def end_session(self, session: str) -> None:
        with self._lock:
            self._sessions.pop(_key(session), None)

    def token_ok(self, given: str) -> bool:
        token = self.current()
        return token is not None and hmac.compare_digest(given.encode(), token.encode())

    def cookie_ok(self, session: str) -> bool:
        if self.current() is None:
            return False
        with self._lock:
            expires = self._sessions.get(_key(session))
        return expires is not None and expires > self.clock()

    def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
        """'bearer', 'cookie', or None."""
        authz = headers.get("authorization", "")
        scheme, _, given = authz.partition(" ")
        if scheme.lower() == "bearer" and self.token_ok(given.strip()):
            return "bearer"
        cookie = cookies.get(COOKIE)
        if cookie and self.cookie_ok(cookie):
            return "cookie"
        return None


def cross_site(headers: Mapping[str, str], host: str) -> str | None:
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
