"""A replica's output as a person reads it: stdout and stderr merged in the order they came.

The supervisor gives the replica two FIFOs in its launch dir instead of the log files (a warm
standby opens them by path, as it would the files) and a thread here copies what arrives to
each stream's own file (`<replica>.out`, `.err`, byte for byte as before) and to one merged
file (`<replica>.log`) in arrival order. A line is written to the merged file whole, so two
streams never cut into each other's lines; a partial line (a progress bar redrawn with `\\r`)
is written once its stream has been quiet for PARTIAL_SECONDS.

The supervisor holds a write end of each FIFO itself, so a reader never sees an end of file
before the replica opened its end; `close` (after the replica and everything it left are
gone) lets go of those ends and waits for the readers to reach the end. Order: lines written
microseconds apart on the two streams may still swap (as in `docker logs`); anything further
apart is in order. Side effects: creates the FIFOs, writes the files, a thread per stream.
Standard library only, imported lazily (supervisor start-up time).
"""

from __future__ import annotations

import contextlib
import os
import select

PARTIAL_SECONDS = 0.2
CHUNK = 65536
FIFOS = {"out": "stdout.fifo", "err": "stderr.fifo"}


class LogRelay:
    """Copies a replica's two streams to their files and to the merged file (see the module)."""

    def __init__(self, directory: str, files: dict[str, str], merged: str,
                 header: str = "") -> None:
        import threading

        self.paths = {s: os.path.join(directory, name) for s, name in FIFOS.items()}
        self.reads: dict[str, int] = {}
        self.holds: list[int] = []
        self.files: dict[str, int] = {}
        self.pending = {s: b"" for s in FIFOS}
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
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        for stream, path in files.items():
            self.files[stream] = os.open(path, flags, 0o600)
        self.merged = os.open(merged, flags, 0o600)
        _write_all(self.merged, header.encode())

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _pump(self, stream: str) -> None:
        """One thread per stream, each woken by its own writes: the threads take the lock in
        about the order the replica wrote, which a single select over both would lose (it
        returns both at once, in descriptor order, when they were written microseconds
        apart)."""
        fd = self.reads[stream]
        while True:
            if self.pending[stream]:  # a partial line: written once the stream is quiet
                ready, _, _ = select.select([fd], [], [], PARTIAL_SECONDS)
                if not ready:
                    with self.lock:
                        self._flush_partial(stream)
                    continue
            data = os.read(fd, CHUNK)
            if not data:  # every writer is gone (the supervisor's own end too): done
                return
            with self.lock:
                self._copy(stream, data)

    def _copy(self, stream: str, data: bytes) -> None:
        _write_all(self.files[stream], data)
        data = self.pending[stream] + data
        cut = data.rfind(b"\n") + 1
        if cut:
            _write_all(self.merged, data[:cut])
        self.pending[stream] = data[cut:]

    def _flush_partial(self, stream: str) -> None:
        if self.pending[stream]:
            _write_all(self.merged, self.pending[stream])
            self.pending[stream] = b""

    def close(self) -> None:
        """Let the threads read to the end and close everything. Call it once the replica and
        its descendants are gone (nothing more can be written)."""
        for fd in self.holds:
            os.close(fd)
        for thread in self.threads:
            if thread.is_alive() or thread.ident is not None:
                thread.join(timeout=10)
        with self.lock:
            for stream in FIFOS:
                self._flush_partial(stream)
        for fd in [*self.reads.values(), *self.files.values(), self.merged]:
            os.close(fd)
        for path in self.paths.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
