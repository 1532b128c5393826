"""Rank, world size and the checkpoint's own gloo groups; collectives used by saves and restores.

The Checkpointer never uses the training's process group: save collectives run in a background
thread, and sharing a group with DDP's all-reduces deadlocks or crashes gloo. Two groups are
created once, lazily, by every rank at the same call: ``data`` (planning, the end-of-save
gather and broadcast, restores; used by one thread at a time) and ``ctrl`` (the per-save
agreement between ranks, used only by the training thread).

The small integer collectives of a save (its outcome gather and announcement, the agreements)
run through buffers kept per group and length, read and written through NumPy views: no
tensor is made or converted per call. Each torch call of a background thread hands the GIL to
the training thread and back (training thread time each, more when the two ranks' cores are
busy), so a save's collectives make as few as they can.

Side effects: process-group creation and collectives.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

from perdure.runtime import compat


class Comm:
    """The ranks that share a checkpoint; world size 1 without torch.distributed, or `alone`
    (this process saves and restores by itself, whatever the process group)."""

    def __init__(self, timeout_s: float, *, alone: bool = False) -> None:
        self.alone = alone
        self.distributed = not alone and dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1
        self._default = dist.group.WORLD if self.distributed else None
        self._timeout = datetime.timedelta(seconds=timeout_s)
        self._data: Any = None
        self._ctrl: Any = None
        self._root = 0  # the data group's rank 0, as a global rank
        # (control group?, length) -> (this rank's row, every rank's rows, their NumPy views)
        self._ints: dict[tuple[bool, int], tuple[torch.Tensor, torch.Tensor, Any, Any]] = {}

    @property
    def stale(self) -> bool:
        """True when torch.distributed was (re)initialised or torn down since (elastic)."""
        if self.alone:
            return False
        now = dist.is_available() and dist.is_initialized()
        return now != self.distributed or (now and dist.group.WORLD is not self._default)

    @property
    def data_group(self) -> Any:
        """The gloo group for checkpoint data collectives (None without torch.distributed)."""
        self._ensure_groups()
        return self._data

    @property
    def control_group(self) -> Any:
        """The gloo group of the training thread's agreements (None without
        torch.distributed)."""
        self._ensure_groups()
        return self._ctrl

    def _ensure_groups(self) -> None:
        if self.distributed and self._data is None:
            self._data = dist.new_group(backend="gloo", timeout=self._timeout)
            self._ctrl = dist.new_group(backend="gloo", timeout=self._timeout)
            self._root = dist.get_global_rank(self._data, 0)

    def agree(self, values: list[int]) -> list[list[int]]:
        """Every rank's ``values`` (same length on all ranks), on the control group."""
        return self._all_gather_ints(values, control=True)

    def all_gather_ints(self, values: list[int]) -> list[list[int]]:
        """Every rank's ``values`` (same length on all ranks), on the data group: one small
        tensor collective, nothing pickled."""
        return self._all_gather_ints(values, control=False)

    def _all_gather_ints(self, values: list[int], *, control: bool) -> list[list[int]]:
        if self.world == 1:
            return [list(values)]
        self._ensure_groups()
        mine, everyone, mine_view, everyone_view = self._buffers(control, len(values))
        mine_view[:] = values
        compat.all_gather_single(everyone, mine, group=self._ctrl if control else self._data)
        return rows(everyone_view.tolist(), len(values))

    def broadcast_int(self, value: int) -> int:
        """Rank 0's ``value`` (a signed 64-bit int) on every rank, on the data group."""
        if self.world == 1:
            return value
        self._ensure_groups()
        box, _, view, _ = self._buffers(False, 1)
        view[0] = value
        dist.broadcast(box, src=self._root, group=self._data)
        return int(view[0])

    def _buffers(self, control: bool, n: int) -> tuple[torch.Tensor, torch.Tensor, Any, Any]:
        """The int64 buffers of a collective of ``n`` values per rank on one group: each group
        is used by one thread at a time, and a collective has ended before its caller reads."""
        got = self._ints.get((control, n))
        if got is None:
            mine = torch.zeros(n, dtype=torch.int64)
            everyone = torch.zeros(n * self.world, dtype=torch.int64)
            got = self._ints[(control, n)] = (mine, everyone, mine.numpy(), everyone.numpy())
        return got

    def all_gather_object(self, obj: Any, *, control: bool = False) -> list[Any]:
        """Every rank's ``obj`` on the data group, or the control group (``control``: from the
        training thread while a save may use the data group)."""
        if self.world == 1:
            return [obj]
        self._ensure_groups()
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self._ctrl if control else self._data)
        return out

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere), on the data group."""
        if self.world == 1:
            return [obj]
        self._ensure_groups()
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=dist.get_global_rank(self._data, 0), group=self._data)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank, on the data group."""
        if self.world == 1:
            return obj
        self._ensure_groups()
        box = [obj]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self._data, 0), group=self._data)
        return box[0]


def rows(flat: list[int], n: int) -> list[list[int]]:
    """Every rank's ``n`` values, from a gather of them into one flat list. No side effects."""
    return [flat[k:k + n] for k in range(0, len(flat), n)]
