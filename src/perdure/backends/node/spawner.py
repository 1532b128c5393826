"""The backend's side of the spawner (`zygote`): start it, send it launches, close it.

`launch()` must never wait for a process to start: each launch is one atomic write of its
directory to a non-blocking pipe. A spawner that died is replaced at the next launch.
"""

from __future__ import annotations

import os
import subprocess
import sys

from perdure import statedir
from perdure.backends.base import LaunchError

_ZYGOTE_CODE = "from perdure.backends.node.zygote import main; main()"


class Spawner:
    """Starts the spawner process on first use and hands it launch directories."""

    def __init__(self, launches_dir: str, warm_pool: int | str, warm_idle: float) -> None:
        self.launches_dir = launches_dir
        self.warm_pool = warm_pool
        self.warm_idle = warm_idle
        # What the spawner and supervisors print before a supervisor opens its own log.
        self.log_path = os.path.join(launches_dir, statedir.EARLY_LOG)
        self._log = os.open(
            self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self.process: subprocess.Popen[bytes] | None = None

    def send(self, directory: str) -> subprocess.Popen[bytes]:
        """Ask for a supervisor for `directory`; the spawner process that was asked."""
        line = (directory + "\n").encode()  # under PIPE_BUF: one atomic write
        for _ in range(2):
            process = self._running()
            assert process.stdin is not None
            try:
                os.write(process.stdin.fileno(), line)
                return process
            except BrokenPipeError:  # it died: start another one, once
                self.process = None
            except BlockingIOError:
                raise LaunchError(
                    "the local backend's spawner is not reading its launches (64 KiB of them "
                    f"are queued); see {self.log_path}"
                ) from None
        raise LaunchError(f"the local backend's spawner exited at once; see {self.log_path}")

    def prewarm(self) -> None:
        """Have the spawner (started now if need be) fill its pool of warm standbys."""
        self.send("+warm")

    def _running(self) -> subprocess.Popen[bytes]:
        if self.process is not None and self.process.poll() is None:
            return self.process
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE_CODE, str(self.warm_pool), repr(self.warm_idle),
                 str(os.getpid())],  # its owner: the pool never outlives this process
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=self._log,
                cwd=self.launches_dir,
                start_new_session=True,  # a Ctrl-C meant for the controller does not reach it
            )
        except OSError as err:
            raise LaunchError(f"cannot start the local backend's spawner: {err}") from err
        assert self.process.stdin is not None
        os.set_blocking(self.process.stdin.fileno(), False)  # launch() must never block
        return self.process

    def close(self) -> None:
        """Close the pipe: the spawner starts what it was sent, then exits."""
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()
        self.process = None
        if self._log >= 0:
            os.close(self._log)
            self._log = -1
