"""Stop a test's `perdure controller` with Ctrl-C; one that does not exit in time fails the
test with its threads' Python stacks (py-spy), which say where it is stuck."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path


def stop_controller(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """SIGINT, then everything it printed; AssertionError with its stacks after `timeout`."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)[0] or ""
    except subprocess.TimeoutExpired as late:
        stacks = _stacks(proc.pid)
        proc.kill()
        out = proc.communicate(timeout=30)[0] or ""
        raise AssertionError(f"the controller did not exit within {timeout:.0f} s of SIGINT; "
                             f"its stacks:\n{stacks}\nit printed:\n{out[-3000:]}") from late


def _stacks(pid: int) -> str:
    spy = Path(sys.executable).with_name("py-spy")
    tool = str(spy) if spy.exists() else shutil.which("py-spy")
    if tool is None:
        return "(py-spy is not installed)"
    r = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True,
                       timeout=60)
    return r.stdout + r.stderr
