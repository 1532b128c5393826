"""The cluster file's `health: preflight`: a check run on a node once per attempt of a job,
before its replicas (or a spare's warm pool) start there. The local backend holds launches at a
`Preflight` gate; the node agents keep a `NodeGate`. What a failure means is core/health.py's.

Side effects: the check's child process, killed past its timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from perdure.core.events import Launch
from perdure.runtime.transport.base import ENV_JOB_SECRET

FAILING_LINES = 3  # of a failed check's output, quoted in the node's quarantine reason
POLL_SECONDS = 0.05  # how often a waiting caller looks at a running check
RECHECK_SECONDS = 60.0  # an agent's failed check stands this long, then runs again if asked


def resolve(argv: Sequence[str]) -> list[str]:
    """`perdure ...` and `python ...` as this interpreter runs them."""
    if argv and argv[0] == "perdure":
        return [sys.executable, "-m", "perdure.cli.main", *argv[1:]]
    if argv and argv[0] == "python":
        return [sys.executable, *argv[1:]]
    return list(argv)


def check_env(launch_env: dict[str, str], node: str | None = None) -> dict[str, str]:
    """A launch's environment and PERDURE_NODE, without the relay's secret."""
    env = {k: v for k, v in launch_env.items() if k != ENV_JOB_SECRET}
    return env if node is None else {**env, "PERDURE_NODE": node}


def failing_lines(output: str) -> str:
    """What a failed check said: its FAIL lines, else its last lines."""
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    failed = [x for x in lines if x.upper().startswith("FAIL")]
    return "; ".join((failed or lines)[-FAILING_LINES:])


@dataclass(frozen=True)
class Outcome:

    passed: bool
    message: str


class Check:
    """One run of the check on this node, started at once; `poll` reaps it."""

    def __init__(self, argv: Sequence[str], shown: str, timeout: float,
                 env: dict[str, str], cwd: str | None) -> None:
        self.shown, self.timeout = shown, timeout
        self.output: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115  # closed by poll
        self.proc: subprocess.Popen[bytes] | None = None  # None: it could not even start
        self.deadline = time.monotonic() + timeout
        try:
            self.proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL,
                                         stdout=self.output, stderr=subprocess.STDOUT,
                                         env=env, cwd=cwd if cwd and os.path.isdir(cwd) else None,
                                         start_new_session=True)
        except OSError as exc:  # not found, not executable: the check fails
            self.output.write(f"FAIL preflight could not start: {exc}".encode())

    def poll(self) -> Outcome | None:
        code = 127 if self.proc is None else self.proc.poll()
        late = code is None and time.monotonic() >= self.deadline
        if code is None and not late:
            return None
        if late and self.proc is not None:
            _kill(self.proc)
        self.output.seek(0)
        text = self.output.read().decode(errors="replace")
        self.output.close()
        if code == 0:
            return Outcome(True, "")
        why = f"timed out after {self.timeout:g}s" if late else f"`{self.shown}` exited {code}"
        said = failing_lines(text)
        return Outcome(False, f"{why}: {said}" if said else why)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill(self.proc)
        self.output.close()


@dataclass
class _Held:
    node: str
    check: Check
    held: list[Launch] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:

    node: str
    passed: bool
    message: str
    held: list[Launch]


class Preflight:
    """Runs the check before a node's first launch of each attempt, holding launches while
    it runs."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        self.argv, self.timeout = resolve(argv), timeout
        self.shown = " ".join(argv)  # as the cluster file says it
        self._passed: set[tuple[str, str, str]] = set()  # (node, job, attempt)
        self._running: dict[tuple[str, str, str], _Held] = {}

    @staticmethod
    def _key(launch: Launch) -> tuple[str, str, str]:
        return (launch.node, launch.job_id, launch.env.get("PERDURE_ATTEMPT", ""))

    def admit(self, launch: Launch) -> bool:
        """Whether `launch` may start now; if not, it is held until its node's check ends."""
        key = self._key(launch)
        if key in self._passed:
            return True
        running = self._running.get(key)
        if running is None:
            env = {**os.environ, **check_env(launch.env, launch.node)}
            check = Check(self.argv, self.shown, self.timeout, env, launch.cwd)
            running = self._running[key] = _Held(launch.node, check)
        running.held.append(launch)
        return False

    def drop(self, launch_id: str) -> Launch | None:
        """Forget a held launch (stopped before its check ended)."""
        for running in self._running.values():
            for launch in running.held:
                if launch.launch_id == launch_id:
                    running.held.remove(launch)
                    return launch
        return None

    def poll(self) -> list[Verdict]:
        out = []
        for key, running in list(self._running.items()):
            outcome = running.check.poll()
            if outcome is None:
                continue
            del self._running[key]
            if outcome.passed:
                self._passed.add(key)
            out.append(Verdict(running.node, outcome.passed, outcome.message, running.held))
        return out

    def close(self) -> None:
        for running in self._running.values():
            running.check.close()
        self._running.clear()


class NodeGate:
    """The check as a node agent runs it, once per key (a job's attempt), for callers on any
    thread; a failure stands for `recheck` seconds, then the next caller runs it again."""

    def __init__(self, argv: Sequence[str], timeout: float,
                 recheck: float = RECHECK_SECONDS) -> None:
        self.argv, self.timeout, self.recheck = resolve(argv), timeout, recheck
        self.shown = " ".join(argv)
        self._lock = threading.Lock()
        self._running: dict[str, Check] = {}
        self._done: dict[str, tuple[Outcome, float]] = {}

    def outcome(self, key: str, env: dict[str, str], cwd: str | None,
                wait: float) -> Outcome | None:
        """The outcome of the check for `key` (started now if it has not run), waiting up to
        `wait` s; None while it runs."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                ended = self._step(key, env, cwd)
            if ended is not None:
                return ended
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_SECONDS)

    def _step(self, key: str, env: dict[str, str], cwd: str | None) -> Outcome | None:
        now = time.monotonic()
        done = self._done.get(key)
        if done is not None and (done[0].passed or now - done[1] < self.recheck):
            return done[0]
        check = self._running.get(key)
        if check is None:
            check = self._running[key] = Check(self.argv, self.shown, self.timeout,
                                               {**os.environ, **env}, cwd)
        ended = check.poll()
        if ended is not None:
            del self._running[key]
            self._done[key] = (ended, now)
        return ended


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.wait()
