"""What counts as a secret, and secrets taken out of text: one rule for every part of perdure.

An environment variable holds a secret when its name says so (`*_KEY`, `*_API_KEY`, `*TOKEN*`,
`*SECRET*`, `*PASSWORD*`, `*CONNECTION_STRING*`, `*CREDENTIAL*`, ...) or its value is a URL
with credentials in it (`https://user:password@host`). `redact` replaces such credentials in
any text with `***`: every message perdure makes or stores from what a replica, a spec or the
environment said (errors, events, the API's answers, an export) passes through it.

Top-level so that the core, the runtime and the shell share it (none may import the others'
modules). No side effects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|CONNECTION_?STRING|ACCESS_KEY|PRIVATE_KEY"
    r"|API_?KEY|(?:^|_)KEY$")
# scheme://user:password@ or scheme://token@. The password may hold '/' and '@' (AWS secret
# keys hold '/'): it runs to the last '@' before a space or quote, so a password is never cut
# in two (a path holding '@' after credentials is hidden with them).
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)"
    r"(?:[^\s/@:'\"<>]*:[^\s'\"<>]*|[^\s/@:'\"<>]+)@")
HIDDEN = "***"
MIN_SECRET = 8  # characters: a shorter value is too common a string to blank out of a text


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    return bool(_SECRET_NAME.search(name.upper()))


def has_userinfo(text: str) -> bool:
    """Whether `text` holds a URL with credentials (`scheme://user:password@...`)."""
    return "://" in text and "@" in text and _USERINFO.search(text) is not None


def is_secret(name: str, value: str) -> bool:
    """Whether the variable `name=value` holds a secret: by its name, or a URL with
    credentials as its value."""
    return is_secret_name(name) or has_userinfo(value)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with the credentials of every URL in it replaced by `***`; with `env`, also the
    values (8 characters or more) of its secret variables, replaced by `<NAME>`."""
    if "://" in text and "@" in text:
        text = _USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text)
    for name, value in (env or {}).items():
        if len(value) >= MIN_SECRET and is_secret(name, value) and value in text:
            text = text.replace(value, f"<{name}>")
    return text


__all__ = ["HIDDEN", "has_userinfo", "is_secret", "is_secret_name", "redact"]
