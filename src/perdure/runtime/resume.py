"""Resume from the newest state there is: a node-local snapshot when it is newer than the
newest committed checkpoint, else the checkpoint.

    from perdure.runtime import resume

    snap = resume.node_snapshotter()          # None outside perdure (no $PERDURE_NODE_DIR)
    restored = resume.restore_newest(state, ckpt, snap)   # every rank, after perdure.init()
    ...
    if snap is not None and step % 10 == 0:
        snap.save(step, state)                # a memcpy; written to tmpfs in the background

A snapshot in the node's tmpfs ($PERDURE_NODE_DIR) outlives a group restart, so a fault loses
at most the snapshot interval. It is used only when every rank holds it and it is at least as
new as the newest committed checkpoint; after a restore at step s, newer ones are removed.
"""

from __future__ import annotations

import os
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perdure.runtime.checkpoint import Checkpointer
    from perdure.runtime.elastic import Snapshotter

__all__ = ["ENV_NODE_DIR", "Restored", "node_snapshotter", "restore_newest"]

ENV_NODE_DIR = "PERDURE_NODE_DIR"


@dataclass(frozen=True)
class Restored:
    """Where training resumes: `step` (None: from scratch) and what it was read from."""

    step: int | None
    source: str  # "snapshot (file)", "checkpoint" or "scratch"
    seconds: float
    skipped_partial: list[str] = field(default_factory=list)  # partial checkpoints ignored

    @property
    def from_checkpoint(self) -> bool:
        return self.source == "checkpoint"

    def describe(self) -> str:
        return "scratch (no checkpoint)" if self.step is None else \
            f"step {self.step} ({self.source})"


def node_snapshotter(keep: int = 2) -> Snapshotter | None:
    """A Snapshotter writing to this job's node-local directory, held in this process only
    (no peer copies: a group restart ends every peer too); None without $PERDURE_NODE_DIR."""
    base = os.environ.get(ENV_NODE_DIR)
    if not base:
        return None
    from perdure.runtime.elastic import Snapshotter

    return Snapshotter(keep=keep, holder_dir=Path(base) / f"snapshots-w{_world_size()}",
                       replicate=False)


def restore_newest(state: MutableMapping[str, Any], checkpointer: Checkpointer | None,
                   snapshotter: Snapshotter | None = None) -> Restored:
    """Load the newest of (every rank's common snapshot, newest committed checkpoint) into
    `state` in place. A collective: call it on every rank at the same point."""
    began = time.perf_counter()
    latest, partial = _newest_checkpoint(checkpointer)
    if snapshotter is not None:
        _drop_unfinished(snapshotter)
        info = snapshotter.load(state)
        if info is not None and (latest is None or info.step >= latest):
            _drop_newer(snapshotter, info.step)
            seconds = time.perf_counter() - began  # load reported it, as restore_latest does
            return Restored(info.step, f"snapshot ({info.source})", seconds, partial)
    step = checkpointer.restore_latest(state) if checkpointer is not None else None
    if snapshotter is not None:
        _drop_newer(snapshotter, -1 if step is None else step)
    skipped = list(checkpointer.skipped_partial) if checkpointer is not None else []
    return Restored(step, "checkpoint" if step is not None else "scratch",
                    time.perf_counter() - began, skipped)


def _world_size() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def _newest_checkpoint(checkpointer: Checkpointer | None) -> tuple[int | None, list[str]]:
    """The newest committed checkpoint step and the partial ones, as rank 0 sees them."""
    if checkpointer is None:
        return None, []
    import torch.distributed as dist

    from perdure.runtime.checkpoint import commit

    box: list[Any] = [None]
    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if not distributed or dist.get_rank() == 0:
        scan = commit.scan(checkpointer.storage)
        box[0] = (scan.latest.step if scan.latest else None, [p.describe() for p in scan.partial])
    if distributed:
        dist.broadcast_object_list(box, src=0)
    latest, partial = box[0]
    return latest, list(partial)


def _files(snapshotter: Snapshotter, pattern: str) -> list[Path]:
    directory = snapshotter.holder_dir
    return sorted(directory.glob(pattern)) if directory is not None else []


def _drop_newer(snapshotter: Snapshotter, step: int) -> None:
    """Remove this rank's snapshot files past `step` (the history rolled back)."""
    for path in _files(snapshotter, "snap-*.bin"):
        if int(path.stem.split("-")[1]) > step:
            path.unlink(missing_ok=True)


def _drop_unfinished(snapshotter: Snapshotter) -> None:
    """Remove temporary files a killed predecessor of this replica left half written."""
    for path in _files(snapshotter, ".snap-*.tmp"):
        path.unlink(missing_ok=True)
