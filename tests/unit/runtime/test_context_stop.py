"""SIGTERM under perdure.init(): a notice (save, then exit suspended) or a plain stop (exit now)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perdure.runtime.context import is_notice
from perdure.runtime.transport import FileTransport, current

SCRIPT = """
import sys, time
import perdure
ctx = perdure.init(distributed=False)
print("ready", flush=True)
deadline = time.time() + 20
while time.time() < deadline:
    if ctx.should_stop:
        print("notice", flush=True)
        ctx.exit_suspended()
    time.sleep(0.01)
sys.exit(3)
"""


def test_is_notice_reads_the_stop_request(tmp_path: Path) -> None:
    stop = tmp_path / "stop.json"
    assert is_notice(current())  # not under perdure: any SIGTERM is a notice
    assert is_notice(FileTransport(stop_file=str(stop)))  # no request written: someone else sent it
    stop.write_text(json.dumps({"signal": 15, "notice": "preemption"}))
    assert is_notice(FileTransport(stop_file=str(stop)))
    stop.write_text(json.dumps({"signal": 15, "notice": "maintenance"}))
    assert is_notice(FileTransport(stop_file=str(stop)))
    stop.write_text(json.dumps({"signal": 15, "notice": None, "reason": "restart: new round 2"}))
    assert not is_notice(FileTransport(stop_file=str(stop)))
    stop.write_text("{half")
    assert is_notice(FileTransport(stop_file=str(stop)))


@pytest.mark.parametrize(("notice", "expected"), [("preemption", 75), (None, -signal.SIGTERM)])
def test_a_notice_is_handed_to_the_script_and_a_plain_stop_ends_it_at_once(
    tmp_path: Path, notice: str | None, expected: int
) -> None:
    stop = tmp_path / "stop.json"
    env = {"PERDURE_STOP_FILE": str(stop), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    stop.write_text(json.dumps({"signal": 15, "notice": notice}))
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=10)
    assert code == expected, proc.stdout.read()
    assert time.monotonic() - began < 2.0
    assert ("notice" in proc.stdout.read()) == (notice is not None)
