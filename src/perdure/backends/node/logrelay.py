"""A replica's output as a person reads it: stdout and stderr merged in the order they came.

The replica writes into two FIFOs in its launch dir; a thread per stream copies what arrives to
the stream's own file and to one merged file, a line whole (`\r` ends one too), so two streams
never cut into each other's lines. A line not ended yet is written anyway once it is
PARTIAL_SECONDS old or PARTIAL_MAX_BYTES long; a write over the log cap trims the file at once.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable

from perdure.backends.node import logcap

PARTIAL_SECONDS = 0.2
PARTIAL_MAX_BYTES = 1 << 20
CHUNK = 65536
FIFOS = {"out": "stdout.fifo", "err": "stderr.fifo"}
LINE_ENDS = (b"\n", b"\r")


class CappedFile:
    """A file trimmed (logcap) once a write takes it over `limit` bytes (0: no cap)."""

    def __init__(self, path: str, limit: int, trimmed: Callable[[str, int, int], None]) -> None:
        self.path, self.limit, self.trimmed = path, limit, trimmed
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self.fd).st_size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        self.size += len(data)
        if self.limit and self.size > self.limit:
            shift, mark = logcap.trim(self.path, self.limit)
            self.size = os.fstat(self.fd).st_size
            if shift:
                self.trimmed(self.path, shift, mark)


class LogRelay:
    """Copies a replica's two streams to their files and to the merged file."""

    def __init__(self, directory: str, files: dict[str, str], merged: str, header: str = "",
                 max_bytes: int = 0,
                 trimmed: Callable[[str, int, int], None] = lambda path, shift, mark: None,
                 ) -> None:
        import threading

        self.paths = {s: os.path.join(directory, name) for s, name in FIFOS.items()}
        self.reads: dict[str, int] = {}
        self.holds: list[int] = []
        self.pending = {s: bytearray() for s in FIFOS}  # a line not ended yet, per stream
        self.since = dict.fromkeys(FIFOS, 0.0)  # when each pending line began (monotonic)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._pump, args=(s,), name=f"log-{s}",
                                         daemon=True) for s in FIFOS]
        for stream, path in self.paths.items():
            with contextlib.suppress(FileNotFoundError):  # a supervisor started again
                os.unlink(path)
            os.mkfifo(path, 0o600)
            self.reads[stream] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            self.holds.append(os.open(path, os.O_WRONLY))
            os.set_blocking(self.reads[stream], True)
        self.files = {s: CappedFile(p, max_bytes, trimmed) for s, p in files.items()}
        self.merged = CappedFile(merged, max_bytes, trimmed)
        self.merged.write(header.encode())

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _pump(self, stream: str) -> None:
        # A thread per stream takes the lock in about the order the replica wrote; one
        # select over both would return both at once, in descriptor order.
        fd = self.reads[stream]
        while True:
            if self.pending[stream]:  # a partial line: written once it is PARTIAL_SECONDS old
                wait = self.since[stream] + PARTIAL_SECONDS - time.monotonic()
                if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                    with self.lock:
                        self._flush_partial(stream)
                    continue
            data = os.read(fd, CHUNK)
            if not data:  # every writer is gone (the supervisor's own end too): done
                return
            with self.lock:
                self._copy(stream, data)

    def _copy(self, stream: str, data: bytes) -> None:
        self.files[stream].write(data)
        pending = self.pending[stream]
        cut = max(data.rfind(end) for end in LINE_ENDS) + 1
        if cut:  # the pending line and every line ended in `data`, in one write
            if pending:
                pending += memoryview(data)[:cut]
                self.merged.write(pending)
                pending.clear()
            else:
                self.merged.write(memoryview(data)[:cut])
        if cut < len(data):
            if not pending:
                self.since[stream] = time.monotonic()
            pending += memoryview(data)[cut:]
            if len(pending) >= PARTIAL_MAX_BYTES:
                self._flush_partial(stream)

    def _flush_partial(self, stream: str) -> None:
        if self.pending[stream]:
            self.merged.write(self.pending[stream])
            self.pending[stream].clear()

    def close(self) -> None:
        """Read to the end and close everything, once the replica and its descendants are gone.
        The supervisor's own write ends kept EOF away until now."""
        for fd in self.holds:
            os.close(fd)
        for thread in self.threads:
            if thread.is_alive() or thread.ident is not None:
                thread.join(timeout=10)
        with self.lock:
            for stream in FIFOS:
                self._flush_partial(stream)
        for fd in [*self.reads.values(), *(f.fd for f in self.files.values()), self.merged.fd]:
            os.close(fd)
        for path in self.paths.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
