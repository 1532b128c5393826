"""Process mode, training side: start the writer process and hand it one save at a time
(started with ``python -m``, not multiprocessing, so a script needs no ``__main__`` guard).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from perdure.runtime.checkpoint.errors import CheckpointError
from perdure.runtime.checkpoint.shared import dtype_name
from perdure.runtime.checkpoint.staging import HostBuffers, StagedItem
from perdure.runtime.checkpoint.writer import Written
from perdure.runtime.checkpoint.writerchild import recv_frame, send_frame

_CHILD = "perdure.runtime.checkpoint.writerchild"


class WriterProcess:
    """The parent's handle on the writer child; one write at a time."""

    def __init__(self) -> None:
        self._sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", _CHILD, str(child.fileno()), str(os.getpid())],
            pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, env=env,
        )
        child.close()
        self._mapped = 0  # generation of the HostBuffers the child has mapped
        self._slot_ids: dict[Any, int] = {}
        self._lock = threading.Lock()

    def write(
        self,
        buffers: HostBuffers,
        path: Path,
        staged: list[StagedItem],
        *,
        fsync: bool,
        algorithm: str,
    ) -> Written:
        """Have the child write ``staged`` (tensors in ``buffers``), checksummed."""
        with self._lock:
            if self._mapped != buffers.generation:
                self._map(buffers)
            items: list[dict[str, Any]] = [
                {"bytes": base64.b64encode(e.data).decode()} if e.data is not None
                else {"slot": self._slot_ids[e.item.index]}
                for e in staged
            ]
            send_frame(self._sock, {"op": "write", "path": str(path), "fsync": fsync,
                                    "checksum": algorithm, "items": items})
            reply = recv_frame(self._sock)
        if reply is None:
            raise CheckpointError(
                f"the checkpoint writer process (pid {self.proc.pid}) exited with status "
                f"{self.proc.poll()}; see its stderr"
            )
        if not reply["ok"]:
            raise CheckpointError(f"the checkpoint writer process failed: {reply['error']}")
        spans = [(int(a), int(b), int(c)) for a, b, c in reply["spans"]]
        return Written(spans, int(reply["size"]), int(reply["crc"]))

    def _map(self, buffers: HostBuffers) -> None:
        assert buffers.fd is not None  # shared buffers, as the Checkpointer makes them here
        self._slot_ids = {index: i for i, index in enumerate(buffers.slots)}
        slots = [{"start": s.offset, "nbytes": s.nbytes, "dtype": dtype_name(s.dtype),
                  "shape": list(s.shape)} for s in buffers.slots.values()]
        send_frame(self._sock, {"op": "map", "size": os.fstat(buffers.fd).st_size,
                                "slots": slots})
        socket.send_fds(self._sock, [b"F"], [buffers.fd])
        self._mapped = buffers.generation

    def close(self) -> None:
        """Stop the child (call after the last save is committed)."""
        try:
            self._sock.close()
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
