"""A scriptable backend without processes, for tests and the scale benchmark: each launch
gets a `FakeRun` from the script, and time is the injected clock's.
"""

from __future__ import annotations

import heapq
import itertools
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from perdure.backends.base import Backend, LaunchError, NodeInfo
from perdure.backends.masterport import MasterPorts
from perdure.core.events import (
    ErrorInfo,
    HoldNodes,
    Launch,
    LaunchFailed,
    Observation,
    ReplicaExited,
    ReplicaStarted,
    Stop,
)


@dataclass(frozen=True)
class FakeRun:
    """How a fake replica behaves: it runs `seconds` (None: until stopped) and then exits."""

    seconds: float | None = None
    exit_code: int = 0
    signal: int | None = None
    oom: bool = False
    error: ErrorInfo | None = None
    fail_launch: bool = False
    start_late: bool = False  # its start is reported a poll after its exit


Script = Callable[[Launch], FakeRun]


@dataclass
class _Proc:
    launch: Launch
    run: FakeRun
    started: float
    ends: float | None
    reported_start: bool = False


class FakeBackend(Backend):

    def __init__(
        self,
        nodes: list[NodeInfo],
        script: Script | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._nodes = nodes
        self.script: Script = script or (lambda launch: FakeRun())
        self.clock = clock
        self.procs: dict[str, _Proc] = {}
        self.launched: list[Launch] = []
        self.stops: list[Stop] = []
        self.holds: list[HoldNodes] = []  # every `hold_nodes`, in order
        self.fenced: dict[str, str] = {}  # the last `fence_nodes`
        self._exits: list[Observation] = []
        self._new: list[str] = []  # launched, start not reported yet
        self._ends: list[tuple[float, str]] = []  # (end time, launch id) heap
        self._injected: list[object] = []
        self._late: list[Observation] = []  # starts held back until the poll after the exit
        self._poll_errors: list[Exception] = []
        self._masters, self._ports = MasterPorts(), itertools.count(30000)

    def inject(self, *replies: object) -> None:
        """Chaos for tests: the next poll returns these as well, whatever they are."""
        self._injected.extend(replies)

    def fail_polls(self, *errors: Exception) -> None:
        """Chaos for tests: the next polls raise these, one each."""
        self._poll_errors.extend(errors)

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def launch(self, launch: Launch) -> None:
        if launch.master_key:  # the env is this launch's own (core.launchenv builds one each)
            launch.env["MASTER_PORT"] = self._masters.port(launch.job_id, launch.master_key,
                                                           lambda: str(next(self._ports)))
        run = self.script(launch)
        if run.fail_launch:
            raise LaunchError(f"fake launch failure for {launch.launch_id}")
        now = self.clock()
        ends = None if run.seconds is None else now + run.seconds
        self.procs[launch.launch_id] = _Proc(launch, run, now, ends)
        self.launched.append(launch)
        self._new.append(launch.launch_id)
        if ends is not None:
            heapq.heappush(self._ends, (ends, launch.launch_id))

    def _exit(self, launch_id: str, code: int, sig: int | None, run: FakeRun | None) -> None:
        self.procs.pop(launch_id, None)
        self._exits.append(
            ReplicaExited(
                launch_id, code, self.clock(), signal=sig,
                oom=bool(run and run.oom), error=run.error if run else None,
            )
        )

    def stop(self, stop: Stop) -> None:
        self.stops.append(stop)
        if stop.launch_id in self.procs and stop.delay > 0:  # let it finish: it does at once
            self._exit(stop.launch_id, 0, None, None)
        elif stop.launch_id in self.procs:
            self._exit(stop.launch_id, 128 + stop.signal, stop.signal, None)

    def kill(self, launch_id: str, sig: int = signal.SIGKILL) -> None:
        """Chaos for tests: the replica dies by `sig` now."""
        if launch_id in self.procs:
            self._exit(launch_id, 128 + sig, sig, None)

    def kill_node(self, node: str) -> None:
        for lid, p in list(self.procs.items()):
            if p.launch.node == node:
                self.kill(lid)

    def poll(self) -> list[Observation]:
        if self._poll_errors:
            raise self._poll_errors.pop(0)
        out: list[Observation] = [*self._late, *self._injected]  # type: ignore[list-item]
        self._late, self._injected = [], []
        now = self.clock()
        for lid in self._new:
            p = self.procs.get(lid)
            if p is not None:
                p.reported_start = True
                start = ReplicaStarted(lid, 1000 + len(self.launched), p.started)
                (self._late if p.run.start_late else out).append(start)
        self._new = []
        while self._ends and self._ends[0][0] <= now:
            _, lid = heapq.heappop(self._ends)
            p = self.procs.get(lid)
            if p is not None and p.ends is not None and p.reported_start:
                self._exit(lid, p.run.exit_code, p.run.signal, p.run)
        out.extend(self._exits)
        self._exits = []
        return out

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        now = self.clock()
        return [LaunchFailed(lid, "unknown launch", now) for lid in launch_ids
                if lid not in self.procs]

    def hold_nodes(self, hold: HoldNodes) -> None:
        self.holds.append(hold)

    def fence_nodes(self, fenced: dict[str, str]) -> None:
        self.fenced = dict(fenced)

    def close(self) -> None:
        pass
