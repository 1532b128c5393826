"""A replica's output as a person reads it: stdout and stderr merged in the order they came.

The supervisor gives the replica two FIFOs in its launch dir instead of the log files (a warm
standby opens them by path, as it would the files) and a thread here copies what arrives to
each stream's own file (`<replica>.out`, `.err`, byte for byte as before) and to one merged
file (`<replica>.log`) in arrival order. A line is written to the merged file whole, so two
streams never cut into each other's lines; a partial line (a progress bar redrawn with `\\r`)
is written once its stream has been quiet for PARTIAL_SECONDS.

The supervisor holds a write end of each FIFO itself, so the reader never sees an end of file
before the replica opened its end; `close` (after the replica and everything it left are
gone) drains what is left. Side effects: creates the FIFOs, writes the files, one thread.
Standard library only, imported lazily (supervisor start-up time).
"""

from __future__ import annotations

import contextlib
import os
import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading

PARTIAL_SECONDS = 0.2
CHUNK = 65536
FIFOS = {"out": "stdout.fifo", "err": "stderr.fifo"}


class LogRelay:
    """Copies a replica's two streams to their files and to the merged file (see the module)."""

    def __init__(self, directory: str, files: dict[str, str], merged: str) -> None:
        self.paths = {s: os.path.join(directory, name) for s, name in FIFOS.items()}
        self.reads: dict[str, int] = {}
        self.holds: list[int] = []
        self.files: dict[str, int] = {}
        self.pending = {s: b"" for s in FIFOS}
        self.thread: threading.Thread | None = None
        self.wake_r, self.wake_w = os.pipe()
        for stream, path in self.paths.items():
            with contextlib.suppress(FileNotFoundError):  # a supervisor started again
                os.unlink(path)
            os.mkfifo(path, 0o600)
            self.reads[stream] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            self.holds.append(os.open(path, os.O_WRONLY))
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        for stream, path in files.items():
            self.files[stream] = os.open(path, flags, 0o600)
        self.merged = os.open(merged, flags, 0o600)

    def start(self) -> None:
        import threading

        self.thread = threading.Thread(target=self._run, name="log-relay", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        by_fd = {fd: s for s, fd in self.reads.items()}
        watch = [*by_fd, self.wake_r]
        while True:
            quiet = PARTIAL_SECONDS if any(self.pending.values()) else None
            ready, _, _ = select.select(watch, [], [], quiet)
            if not ready:
                self._flush_partials()
                continue
            if self.wake_r in ready:
                return
            for fd in ready:
                self._copy(by_fd[fd])

    def _copy(self, stream: str) -> bool:
        """Copy one read of `stream`; whether there was anything."""
        try:
            data = os.read(self.reads[stream], CHUNK)
        except BlockingIOError:
            return False
        if not data:
            return False
        _write_all(self.files[stream], data)
        data = self.pending[stream] + data
        cut = data.rfind(b"\n") + 1
        if cut:
            _write_all(self.merged, data[:cut])
        self.pending[stream] = data[cut:]
        return True

    def _flush_partials(self) -> None:
        for stream, data in self.pending.items():
            if data:
                _write_all(self.merged, data)
                self.pending[stream] = b""

    def close(self) -> None:
        """Stop the thread, copy what the streams still hold, close everything. Call it once
        the replica and its descendants are gone (nothing more can be written)."""
        os.write(self.wake_w, b"x")
        if self.thread is not None:
            self.thread.join(timeout=10)
        for fd in self.holds:
            os.close(fd)
        for stream in self.reads:
            while self._copy(stream):
                pass
        self._flush_partials()
        for fd in [*self.reads.values(), *self.files.values(), self.merged, self.wake_r,
                   self.wake_w]:
            os.close(fd)
        for path in self.paths.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
