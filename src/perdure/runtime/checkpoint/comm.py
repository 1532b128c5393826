"""Rank, world size and the checkpoint's own gloo groups; collectives used by saves and restores.

Never the training's process group: save collectives run in a background thread, and sharing
a group with DDP's all-reduces deadlocks gloo. ``data`` (planning, the end of a save, restores)
and ``ctrl`` (the training thread's per-save agreement) are created lazily by every rank.
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
        """The gloo group of the training thread's agreements (None without a group)."""
        self._ensure_groups()
        return self._ctrl

    def _ensure_groups(self) -> None:
        if self.distributed and self._data is None:
            self._data = dist.new_group(backend="gloo", timeout=self._timeout)
            self._ctrl = dist.new_group(backend="gloo", timeout=self._timeout)

    def agree(self, values: list[int]) -> list[list[int]]:
        """Every rank's ``values`` (as many on each), on the control group, nothing pickled."""
        if self.world == 1:
            return [list(values)]
        self._ensure_groups()
        n = len(values)
        everyone = torch.empty(n * self.world, dtype=torch.int64)
        compat.all_gather_single(everyone, torch.tensor(values, dtype=torch.int64),
                                 group=self._ctrl)
        flat = everyone.tolist()
        return [flat[k:k + n] for k in range(0, len(flat), n)]

    def all_gather_object(self, obj: Any, *, control: bool = False) -> list[Any]:
        """Every rank's ``obj`` on the data group, or the control group (``control``)."""
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
