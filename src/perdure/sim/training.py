"""The training a simulated job does between interruptions, as the runtime would report it.

No side effects. Steps, persistent saves (a save waits for the previous one's persist, as the
Checkpointer's default `on_busy: wait` does) and snapshots take the calibration's seconds; an
interruption turns what was done into the records the runtime writes, for
`perdure.core.goodput.account`, and the next start restores from the newest state that survived.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perdure.sim.calibration import Calibration


@dataclass
class Segment:
    t0: float  # first step begins
    s0: int  # the step restored from
    every: int  # steps between persistent saves


@dataclass
class Training:
    calib: Calibration
    snapshots: bool
    durable_step: int = 0  # newest persisted checkpoint
    snap_step: int | None = None  # newest in-memory snapshot (None: none survives)
    step: int = 0  # steps done so far on the current line
    segment: Segment | None = None
    records: list[dict[str, Any]] = field(default_factory=list)  # the primary launch's
    snap_every: int = 10  # steps between in-memory snapshots

    def __post_init__(self) -> None:
        self.snap_every = self.calib.snapshot_every_steps

    @property
    def step_time(self) -> float:
        """Seconds per step with the snapshots' blocking spread over their steps."""
        c = self.calib
        snap = c.snapshot_blocking_seconds / self.snap_every if self.snapshots else 0.0
        return c.step_seconds + snap

    def save_wait(self, every: int) -> float:
        """Seconds a save waits for the previous one's persist, `every` steps after it (counted
        for a segment's first save too: at most one wait too many per segment)."""
        return max(0.0, self.calib.persist_seconds - every * self.step_time)

    def start(self, now: float, every_seconds: float, node_lost: bool) -> tuple[float, str]:
        """Every replica is up: restore, then train. When the first step begins, and from
        where it restored."""
        c = self.calib
        if self.snapshots and self.snap_step is not None and self.snap_step >= self.durable_step:
            step, cost = self.snap_step, (c.restore_peer_seconds if node_lost
                                          else c.restore_local_seconds)
            source = "peer snapshot" if node_lost else "node-local snapshot"
        elif self.durable_step > 0:
            step, cost, source = self.durable_step, c.restore_disk_seconds, "checkpoint"
        else:
            step, cost, source = 0, 0.0, "the beginning"
        t0 = now + c.rendezvous_seconds + cost
        if self.step > 0 or cost > 0:
            self.records.append({"kind": "restore", "step": step or None, "seconds": cost,
                                 "t": t0})
        self.step = step
        every = max(1, round(every_seconds / c.step_seconds))
        self.segment = Segment(t0, step, every)
        return t0, source

    def interrupt(self, t: float, keeps_snapshot: bool) -> float:
        """The group stopped training at `t`; the seconds it trained (0 if not training)."""
        seg, self.segment = self.segment, None
        if seg is None or t <= seg.t0:
            return 0.0
        c = self.calib
        block = self.save_wait(seg.every) + c.save_blocking_seconds
        cycle = seg.every * self.step_time + block
        elapsed = t - seg.t0
        full = math.floor(elapsed / cycle)
        rem = elapsed - full * cycle
        steps = full * seg.every + min(seg.every, math.floor(rem / self.step_time))
        blocked = full * block + max(0.0, min(rem - seg.every * self.step_time, block))
        persisted = min(full, max(0, math.floor((elapsed - c.persist_seconds) / cycle)))
        if persisted:
            self.durable_step = max(self.durable_step, seg.s0 + persisted * seg.every)
        if steps:
            self.records.append({"kind": "steps", "first": seg.s0 + 1, "last": seg.s0 + steps,
                                 "seconds": steps * c.step_seconds, "t0": seg.t0, "t": t})
            if self.snapshots:
                blocked += steps * (self.step_time - c.step_seconds)
        if blocked:
            self.records.append({"kind": "checkpoint_save", "seconds": blocked, "t": t})
        self.step = seg.s0 + steps
        if self.snapshots and keeps_snapshot:
            every = self.snap_every  # a save's staged copy is in host memory too
            self.snap_step = seg.s0 + max((steps // every) * every, full * seg.every)
        elif not keeps_snapshot:
            self.snap_step = None
        return elapsed
