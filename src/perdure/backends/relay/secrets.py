"""The state dir's secret (`<state dir>/secret`, 32 random bytes) and the per-job secrets
derived from it (HMAC-SHA256), which every listener of a job makes its peers prove."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from perdure import statedir
from perdure.store.files import make_state_dir

_SIZE = 32


class SecretError(RuntimeError):
    """The state dir's secret file exists but cannot be used."""


def state_secret(state_dir: Path) -> bytes:
    """The state dir's secret, created (0600, O_EXCL: two creators agree) if missing."""
    path = state_dir / statedir.SECRET
    try:
        make_state_dir(state_dir)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return _read(path)
        value = secrets.token_bytes(_SIZE)
        try:
            os.write(fd, value)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SecretError(f"{path}: cannot be created or read: {exc.strerror or exc}; "
                          "check the state dir's permissions and free space") from exc
    return value


def _read(path: Path) -> bytes:
    for _ in range(100):  # its creator may not have written it yet (O_EXCL, then write)
        value = path.read_bytes()
        if len(value) == _SIZE:
            return value
        if value:
            break
        time.sleep(0.01)
    raise SecretError(f"{path}: expected {_SIZE} bytes, found {len(value)}; delete it to make "
                      "a new one (running jobs then lose their peers' trust: restart them)")


def job_secret(state_secret: bytes, job_id: str) -> str:
    """The secret of job `job_id` (hex): what its replicas and listeners share. No side effects."""
    return hmac.new(state_secret, job_id.encode(), hashlib.sha256).hexdigest()
