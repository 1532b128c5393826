"""The log cap holds as the bytes arrive: a replica that writes far past it and exits at once
leaves every log file under the cap (it used to be applied by sampling, once a second)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_local_support import NODES, collect, make_launch

from perdure.backends.local import LocalBackend
from perdure.backends.node import logcap

FLOOD_THEN_EXIT = """
import os
block = b"".join(b"%08d " % i + b"x" * 1014 + b"\\n" for i in range(1024))  # 1 MiB of lines
for _ in range(200):
    os.write(1, block)
os.write(2, b"a little on stderr\\n")
os.write(1, b"LAST LINE\\n")
"""


def test_a_replica_that_floods_and_exits_at_once_stays_under_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(logcap.ENV, "8")
    backend = LocalBackend(tmp_path / "state", NODES, warm_pool=0)
    try:
        launch = make_launch(tmp_path, FLOOD_THEN_EXIT)
        backend.launch(launch)
        exited = collect(backend, {launch.launch_id}, timeout=120)[-1]
        assert exited.exit_code == 0  # type: ignore[attr-defined]
    finally:
        backend.close()
    for suffix in ("out", "log"):  # 200 MiB went through each
        data = (tmp_path / "logs" / f"worker-0.{suffix}").read_bytes()
        assert len(data) <= 8 << 20, suffix
        assert data.startswith(b"=== perdure: "), suffix
        # the merged log interleaves the two streams as they arrive: the last line is in its
        # tail, before or after the stderr line
        assert b"LAST LINE\n" in data[-64:], suffix
    assert (tmp_path / "logs" / "worker-0.err").read_bytes().endswith(b"a little on stderr\n")
