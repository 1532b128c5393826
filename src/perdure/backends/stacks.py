"""Capturing a replica's Python stacks, every thread: what a backend's `dump_stacks` returns
(`Backend.dump_stacks`; the local backend reads its replicas with `dump_pid`).

py-spy reads any CPython process's stacks from outside (ptrace); where it cannot attach
(missing, no ptrace permission, a process gone) the dump carries the reason instead.

Side effects: runs py-spy as a subprocess (bounded by a timeout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StackDump:
    """A process's threads as py-spy reports them, or why there are none (`error`)."""

    threads: list[dict[str, Any]] = field(default_factory=list)
    tool: str = "py-spy"
    error: str | None = None


def pyspy() -> str | None:
    """The py-spy binary: beside this interpreter (a venv), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def dump_pid(pid: int, timeout: float = 10.0, nonblocking: bool = False) -> StackDump:
    """py-spy's dump of `pid`, all threads; the reason instead where it cannot attach."""
    exe = pyspy()
    if exe is None:
        return StackDump(error="py-spy is not installed (pip install 'perdure[watchdog]')")
    try:
        argv = [exe, "dump", "--pid", str(pid), "--json", *(["--nonblocking"] * nonblocking)]
        out = subprocess.run(argv, capture_output=True,
                             text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return StackDump(error=f"py-spy did not attach to pid {pid} within {timeout:g}s")
    if out.returncode != 0:
        first = next((ln for ln in out.stderr.splitlines() if ln.strip()), "no output")
        return StackDump(error=f"py-spy could not read pid {pid}: {first.strip()}")
    try:
        data = json.loads(out.stdout)
    except ValueError:
        return StackDump(error=f"py-spy printed no JSON for pid {pid}")
    threads = [t for t in data if isinstance(t, dict)] if isinstance(data, list) else []
    return StackDump(threads=threads)
