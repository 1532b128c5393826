"""The file transport: the runtime's contracts as files in the controller's state dir.

For replicas on the controller's host. The layout (the relay writes the same one): in the
rdzv dir `round.json`, `ready/<attempt>-<replica>.json`, `finished/<attempt>.json`,
`holders/<replica>.json` and each round's FileStore; `progress.jsonl` in the report dir; the
stop and error files at $PERDURE_STOP_FILE and $PERDURE_ERROR_FILE.

Side effects: reads and writes those files (records atomically, by rename).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from perdure import statedir
from perdure.runtime.transport.base import HolderRecord

__all__ = ["FileTransport"]


def _read_json(path: Path) -> Any:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return None


class FileTransport:
    """Files in directories this process can reach (see the module docstring)."""

    kind = "file"

    def __init__(self, *, rdzv_dir: str | os.PathLike[str] | None = None,
                 report_dir: str | os.PathLike[str] | None = None,
                 stop_file: str | None = None, error_file: str | None = None) -> None:
        self.rdzv_dir = Path(rdzv_dir) if rdzv_dir else None
        self.report_dir = Path(report_dir) if report_dir else None
        self.stop_file = stop_file or None
        self.error_file = error_file or None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FileTransport:
        report = env.get("PERDURE_REPORT_DIR")
        return cls(
            rdzv_dir=env.get("PERDURE_RDZV_DIR") or None,
            # a report dir that does not exist (outside perdure, a stale variable) gets nothing
            report_dir=report if report and Path(report).is_dir() else None,
            stop_file=env.get("PERDURE_STOP_FILE"),
            error_file=env.get("PERDURE_ERROR_FILE"),
        )

    @property
    def elastic(self) -> bool:
        return self.rdzv_dir is not None

    @property
    def reports(self) -> bool:
        return self.report_dir is not None

    def where(self) -> str:
        return str(self.rdzv_dir)

    def _rdzv(self) -> Path:
        if self.rdzv_dir is None:
            raise RuntimeError("no rendezvous directory: this job is not elastic "
                               "(PERDURE_RDZV_DIR is unset)")
        return self.rdzv_dir

    # ---- membership rounds and markers ---------------------------------------------------

    def round_doc(self, since: Hashable | None) -> tuple[Hashable | None, Any]:
        path = self._rdzv() / statedir.ROUND
        try:
            st = os.stat(path)
            stamp: Hashable = (st.st_ino, st.st_mtime_ns, st.st_size)  # a rename: new inode
            if stamp == since:
                return stamp, None
            text = path.read_text()
        except FileNotFoundError:
            return None, None
        try:
            return stamp, json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path} is not valid JSON ({exc}); it is written by perdure") from None

    def _marker(self, kind: str, name: str) -> Path:
        return self._rdzv() / kind / f"{name}.json"

    def _write_marker(self, path: Path, doc: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        statedir.write_atomically(path, json.dumps(doc))

    def mark_ready(self, attempt: int, replica: str, round_no: int) -> None:
        self._write_marker(self._marker("ready", f"{attempt}-{replica}"),
                           {"round": round_no, "pid": os.getpid(), "time": time.time()})

    def ready_round(self, attempt: int, replica: str) -> int | None:
        doc = _read_json(self._marker("ready", f"{attempt}-{replica}"))
        try:
            return int(doc["round"])
        except (TypeError, ValueError, KeyError):
            return None

    def mark_finished(self, attempt: int, replica: str, round_no: int) -> None:
        self._write_marker(self._marker("finished", str(attempt)),
                           {"replica": replica, "round": round_no, "time": time.time()})

    def finished(self, attempt: int) -> bool:
        return self._marker("finished", str(attempt)).exists()

    def round_store(self, name: str) -> Any:
        import torch.distributed as dist

        # torch's FileStore retries opening forever (holding the GIL) in a missing directory
        self._rdzv().mkdir(parents=True, exist_ok=True)
        # numWorkers=-1: never delete the file when clients go away; members that abandon or
        # are replaced would otherwise delete it under the ones still using it.
        return dist.FileStore(str(self._rdzv() / name), -1)  # type: ignore[attr-defined]

    # ---- snapshot holders ----------------------------------------------------------------

    def register_holder(self, record: HolderRecord) -> None:
        self._write_marker(self._marker("holders", str(record["replica"])), dict(record))

    def holders(self) -> list[HolderRecord]:
        docs = (_read_json(p) for p in sorted((self._rdzv() / "holders").glob("*.json")))
        return [doc for doc in docs if isinstance(doc, dict)]

    # ---- notices, errors, progress -------------------------------------------------------

    def stop_request(self) -> dict[str, Any] | None:
        if not self.stop_file:
            return None
        doc = _read_json(Path(self.stop_file))
        return doc if isinstance(doc, dict) else None

    def write_error(self, payload: dict[str, Any]) -> str | None:
        if not self.error_file:
            return None
        statedir.write_atomically(Path(self.error_file), json.dumps(payload))
        return self.error_file

    def append_progress(self, lines: list[str]) -> None:
        if self.report_dir is None or not lines:
            return
        # one append: a reader never sees half a line from a live process
        fd = os.open(self.report_dir / statedir.PROGRESS, os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
        try:
            os.write(fd, ("\n".join(lines) + "\n").encode())
        finally:
            os.close(fd)

    def flush_progress(self, timeout: float) -> bool:
        return True  # appends are written when made
