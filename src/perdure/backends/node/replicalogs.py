"""A replica's log files as its supervisor writes them, with the log relay (`output`) if any."""

from __future__ import annotations

import os
import time

from perdure import statedir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from perdure.backends.node.logrelay import LogRelay


class Logs:
    """The replica's stdout and stderr for one launch, from `open` to `close`."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.out_fd = self.err_fd = -1
        self.err_offset = 0  # where this launch's stderr begins (restarts append)
        self.relay: LogRelay | None = None
        self.header_text = ""

    def open(self) -> None:
        """Open both files (private: a replica may print its API keys), append the header."""
        stdout_path, stderr_path = self.spec["stdout"], self.spec["stderr"]
        for path in (stdout_path, stderr_path):
            statedir.private_dirs(os.path.dirname(path) or ".")
        self.out_fd = os.open(stdout_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.err_fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        header = self.header_text = _header(self.spec["launch_id"])
        os.write(self.out_fd, header.encode())
        os.write(self.err_fd, header.encode())
        # Restarts append to the same file: parse only what this launch wrote.
        self.err_offset = os.lseek(self.err_fd, 0, os.SEEK_END)

    def relay_streams(self, directory: str) -> dict[str, str] | None:
        """With a merged `output`, the relay's FIFOs the replica writes to (None: no relay)."""
        merged = self.spec.get("output")
        if not merged:
            return None
        from perdure.backends.node.logrelay import LogRelay

        limit = self.spec.get("log_max_bytes")  # the log cap; 0: none
        limit = limit if isinstance(limit, int) and limit > 0 else 0
        self.relay = LogRelay(directory, {"out": self.spec["stdout"], "err": self.spec["stderr"]},
                              merged, self.header_text, limit, self._trimmed)
        self.close_fds()
        self.out_fd = os.open(self.relay.paths["out"], os.O_WRONLY)
        self.err_fd = os.open(self.relay.paths["err"], os.O_WRONLY)
        return self.relay.paths

    def close_fds(self) -> None:
        """The supervisor's copies of the descriptors (the replica has its own)."""
        for fd in (self.out_fd, self.err_fd):
            if fd >= 0:
                os.close(fd)
        self.out_fd = self.err_fd = -1

    def start_relay(self) -> None:
        if self.relay is not None:
            self.relay.start()

    def close_relay(self) -> None:
        """Drain and stop the relay, if any (before stderr's tail is read)."""
        if self.relay is not None:
            self.relay.close()

    def _trimmed(self, path: str, shift: int, mark: int) -> None:
        # Where this launch's stderr begins moves with a trim.
        if shift and path == self.spec["stderr"]:
            self.err_offset = max(self.err_offset - shift, mark)


def _header(launch_id: str) -> str:
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
    zone = time.strftime("%z", time.localtime(now))
    return f"=== {launch_id} started {stamp}.{int(now % 1 * 1000):03d}{zone} ===\n"
