"""The cluster file's `health: preflight`: a check run on a node before an attempt's
replicas start there (node-side; the local backend, the Ray node agent and the Slurm agent
step each hold one gate).

Side effects: starts the check as a child process (never waits for it: `poll` reaps it) and
kills one that runs past its timeout. The rule it serves (a failed check quarantines the
node) is core/health.py's; this only runs the check and says how it went.

A node passes once per attempt of a job: a replica restarted in the same attempt on the same
node starts without a new check. Launches wait (held here) while their node's check runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from perdure.core.events import Launch

FAILING_LINES = 3  # of a failed check's output, quoted in the node's quarantine reason


def resolve(argv: Sequence[str]) -> list[str]:
    """`perdure ...` and `python ...` as this interpreter runs them (a node whose PATH lacks
    the venv still finds them)."""
    if argv and argv[0] == "perdure":
        return [sys.executable, "-m", "perdure.cli.main", *argv[1:]]
    if argv and argv[0] == "python":
        return [sys.executable, *argv[1:]]
    return list(argv)


def failing_lines(output: str) -> str:
    """What a failed check said: its FAIL lines, else its last lines."""
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    failed = [x for x in lines if x.upper().startswith("FAIL")]
    return "; ".join((failed or lines)[-FAILING_LINES:])


@dataclass
class _Check:
    node: str
    proc: subprocess.Popen[bytes] | None  # None: it could not even start (exit 127)
    output: IO[bytes]
    deadline: float
    held: list[Launch] = field(default_factory=list)

    def exit_code(self) -> int | None:
        return 127 if self.proc is None else self.proc.poll()


@dataclass(frozen=True)
class Verdict:
    """A check that ended: its node, whether it passed, why not, and the launches it held."""

    node: str
    passed: bool
    message: str
    held: list[Launch]


class Preflight:
    """Runs `argv` on a node before its first launch of each attempt; holds launches while
    it runs. `poll` returns the checks that ended."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.argv, self.timeout = resolve(argv), timeout
        self.shown = " ".join(argv)  # as the cluster file says it
        self._passed: set[tuple[str, str, str]] = set()  # (node, job, attempt)
        self._running: dict[tuple[str, str, str], _Check] = {}

    @staticmethod
    def _key(launch: Launch) -> tuple[str, str, str]:
        return (launch.node, launch.job_id, launch.env.get("PERDURE_ATTEMPT", ""))

    def admit(self, launch: Launch) -> bool:
        """Whether `launch` may start now; if not, it is held until its node's check ends."""
        key = self._key(launch)
        if key in self._passed:
            return True
        check = self._running.get(key)
        if check is None:
            check = self._running[key] = self._start(launch)
        check.held.append(launch)
        return False

    def _start(self, launch: Launch) -> _Check:
        output = tempfile.TemporaryFile()  # noqa: SIM115  # closed by `poll` or `close`
        env = {**os.environ, **launch.env, "PERDURE_NODE": launch.node}
        cwd = launch.cwd if os.path.isdir(launch.cwd) else None
        proc: subprocess.Popen[bytes] | None = None
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=output,
                                    stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                    start_new_session=True)
        except OSError as exc:  # not found, not executable: the check fails
            output.write(f"FAIL preflight could not start: {exc}".encode())
        return _Check(launch.node, proc, output, time.monotonic() + self.timeout)

    def drop(self, launch_id: str) -> Launch | None:
        """Forget a held launch (it was stopped before its check ended); the launch."""
        for check in self._running.values():
            for launch in check.held:
                if launch.launch_id == launch_id:
                    check.held.remove(launch)
                    return launch
        return None

    def poll(self) -> list[Verdict]:
        """The checks that ended since the last poll (one past its timeout is killed)."""
        out = []
        now = time.monotonic()
        for key, check in list(self._running.items()):
            code = check.exit_code()
            late = code is None and now >= check.deadline
            if code is None and not late:
                continue
            if late and check.proc is not None:
                _kill(check.proc)
            del self._running[key]
            check.output.seek(0)
            text = check.output.read().decode(errors="replace")
            check.output.close()
            if code == 0:
                self._passed.add(key)
                out.append(Verdict(check.node, True, "", check.held))
                continue
            why = (f"timed out after {self.timeout:g}s" if late
                   else f"`{self.shown}` exited {code}")
            said = failing_lines(text)
            out.append(Verdict(check.node, False, f"{why}: {said}" if said else why,
                               check.held))
        return out

    def close(self) -> None:
        for check in self._running.values():
            if check.proc is not None:
                _kill(check.proc)
            check.output.close()
        self._running.clear()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()
