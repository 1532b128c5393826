"""The files PerdureCheckpointIO leaves where Lightning names them, at a path or an fsspec URL.

A name (`last.ckpt`) first holds a small pointer to the step perdure is saving; once that step
is committed, a background thread replaces it, atomically, with the whole checkpoint as
Lightning's own `TorchCheckpointIO` writes it, so `torch.load` and a Trainer without perdure
read it. Paths go through fsspec (Lightning's `get_filesystem`): `s3://` stays a URL.
"""

from __future__ import annotations

import io
import json
import os
import queue
import threading
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem

from perdure import statedir
from perdure.runtime import Checkpointer

__all__ = ["POINTER_KIND", "PortableWriter", "join", "load_step", "read_pointer",
           "write_pointer"]

POINTER_KIND = "perdure-lightning-checkpoint"
_POINTER_MAX = 4096  # a pointer is ~60 bytes; anything longer is a checkpoint of its own


def join(url: str, name: str) -> str:
    """`name` inside the folder or fsspec URL `url` (Path() would make `s3://b` `s3:/b`)."""
    return f"{url.rstrip('/')}/{name}" if "://" in url else os.path.join(url, name)


def write_pointer(path: str, step: int) -> None:
    """A pointer to `step` at `path`, atomically."""
    _put(path, json.dumps({"kind": POINTER_KIND, "step": step}).encode())


def read_pointer(path: str) -> int | None:
    """The step the pointer at `path` names; None when `path` holds a whole checkpoint (any
    other file: `torch.load` reads it). Raises FileNotFoundError when there is nothing."""
    fs = get_filesystem(path)
    with fs.open(path, "rb") as f:
        head = f.read(_POINTER_MAX + 1)
    if not head.startswith(b"{") or len(head) > _POINTER_MAX:
        return None
    try:
        data = json.loads(head)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") != POINTER_KIND:
        return None
    return int(data["step"])


def load_step(ckpt: Checkpointer, step: int) -> dict[str, Any]:
    """The Lightning checkpoint dict of the committed `step`: its shape first, then its
    tensors into that shape."""
    head: dict[str, Any] = {"skeleton": None}
    ckpt.restore(head, step)
    state = {"lightning": _template(json.loads(head["skeleton"]))}
    ckpt.restore(state, step)
    loaded: dict[str, Any] = state["lightning"]
    return loaded


def skeleton(value: Any) -> Any:
    """The checkpoint's shape as JSON: tensors as their shape and dtype, containers kept."""
    if isinstance(value, torch.Tensor):
        return {"__tensor__": list(value.shape), "dtype": str(value.dtype).split(".")[-1]}
    if isinstance(value, dict):
        return {"__dict__": [[_key(k), skeleton(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"__list__": [skeleton(v) for v in value], "tuple": isinstance(value, tuple)}
    return None  # a plain value: loaded as it was saved


class PortableWriter:
    """Replaces pointers with whole checkpoints once their step is committed (module
    docstring). One background thread; its error is kept and raised once, at `wait`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._queue: queue.Queue[tuple[int, str]] = queue.Queue()
        self._lock = threading.Lock()
        self._removed: set[str] = set()  # names Lightning removed while they were queued
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._reader: Checkpointer | None = None

    def submit(self, step: int, path: str) -> None:
        """Write `path` from `step` (call once `step` is committed or its save has failed)."""
        with self._lock:
            self._removed.discard(path)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="perdure-lightning-files",
                                            daemon=True)
            self._thread.start()
        self._queue.put((step, path))

    def remove(self, path: str) -> None:
        """Lightning removed `path`: a queued write of it must not bring it back."""
        with self._lock:
            self._removed.add(path)
            fs = get_filesystem(path)
            if fs.exists(path):
                fs.rm(path)

    def wait(self) -> None:
        """Until every submitted file is written; raises the first error, once."""
        self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            step, path = self._queue.get()
            try:
                self._write(step, path)
            except BaseException as err:  # kept for wait(): a background error never vanishes
                if self._error is None:
                    self._error = err
            finally:
                self._queue.task_done()

    def _write(self, step: int, path: str) -> None:
        if self._reader is None:  # its own: restores here must not touch the saver's state
            self._reader = Checkpointer(self.url, keep=None, alone=True, report_times=False)
        if step not in self._reader.steps():  # the save failed (and was reported): keep
            return                            # the pointer, which resumes from the one before
        data = io.BytesIO()
        torch.save(load_step(self._reader, step), data)
        with self._lock:
            if path not in self._removed:
                _put(path, data.getvalue())


def _put(path: str, data: bytes) -> None:
    """`data` at `path` atomically: a temporary name renamed over it on a local disk, a single
    put on an object store."""
    fs = get_filesystem(path)
    parent = os.path.dirname(path.rstrip("/"))
    if "://" not in path:
        os.makedirs(parent or ".", exist_ok=True)
        statedir.write_atomically(path, data, durable=True, mode=0o666)  # the umask decides
        return
    fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(path, data)


def _key(key: Any) -> Any:
    return key if isinstance(key, (str, int, float, bool)) or key is None else str(key)


def _template(skel: Any) -> Any:
    """Empty tensors and containers in the checkpoint's shape: what a restore fills in."""
    if not isinstance(skel, dict):
        return None
    if "__tensor__" in skel:
        return torch.empty(skel["__tensor__"], dtype=getattr(torch, skel["dtype"]))
    if "__dict__" in skel:
        return {k: _template(v) for k, v in skel["__dict__"]}
    items = [_template(v) for v in skel["__list__"]]
    return tuple(items) if skel["tuple"] else items
