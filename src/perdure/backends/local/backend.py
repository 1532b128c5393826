"""Run replicas as processes on this machine, each under a supervisor process of its own.

`launch` hands the launch directory to the spawner and waits for nothing; `poll` costs one stat
per active launch. Supervisors run in sessions of their own: a controller that is killed
leaves its replicas running, and a new controller `adopt`s them.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from perdure import statedir
from perdure.backends import launchdir
from perdure.backends.base import Backend, LaunchError, NodeInfo, exit_observation
from perdure.backends.local.progress import ProgressReader
from perdure.backends.local.tracked import Tracked, abandon_record, lost_message, supervisor_gone
from perdure.backends.masterport import MasterPorts, local_port
from perdure.backends.node import logcap, warm
from perdure.backends.node.memory import MECHANISMS, cgroup_parent
from perdure.backends.node.replicas import check_launch, kill_leftovers
from perdure.backends.node.spawner import Spawner
from perdure.backends.node.transport import LaunchTransport
from perdure.backends.preflight import Preflight
from perdure.backends.stacks import StackDump, dump_pid
from perdure.core.events import (
    Launch,
    LaunchFailed,
    NodeCheckFailed,
    Observation,
    ReplicaExited,
    ReplicaStarted,
    Stop,
)


class LocalBackend(Backend):
    """Replicas as local processes, grouped into virtual nodes (each a failure domain).

    `memory_mechanism`: "auto" (cgroup v2, then v1, then RSS polling) or one of them. With
    `inherit_env` a replica's environment is this process's overlaid with `Launch.env`.
    `warm_pool` / `warm_idle`: the warm standby pool's size and idle time (`warm`).
    `preflight`: the cluster file's `health: preflight` check, run on a node before an
    attempt's first replica there.
    """

    def __init__(
        self,
        state_dir: Path | str,
        nodes: list[NodeInfo],
        *,
        memory_mechanism: str = "auto",
        inherit_env: bool = True,
        warm_pool: int | str | None = None,
        warm_idle: float | None = None,
        transport: str = "file",
        preflight: Preflight | None = None,
    ) -> None:
        if not sys.platform.startswith("linux"):
            raise RuntimeError(
                f"the local backend runs replicas on Linux only (it relies on /proc, prctl and "
                f"sigtimedwait); this is {sys.platform}. Run the controller on a Linux host."
            )
        if memory_mechanism not in MECHANISMS:
            raise ValueError(
                f"memory_mechanism={memory_mechanism!r} is unknown: use one of "
                f"{', '.join(MECHANISMS)}"
            )
        cgroup_parent()  # a bad $PERDURE_CGROUP_PARENT is said now, not hidden by the fallback
        # Strings, not Paths: launch() is on the controller's hot path.
        self._launches = os.path.join(os.path.realpath(state_dir), statedir.LAUNCHES)
        statedir.private_dirs(self._launches)
        os.chmod(self._launches, 0o700)  # private_dirs leaves an existing one as it is
        self._spawner = Spawner(
            self._launches, warm.pool_size(warm_pool), warm.idle_seconds(warm_idle)
        )
        self._log_max_bytes = logcap.max_bytes()  # ValueError naming $PERDURE_LOG_MAX_MB
        self._nodes = list(nodes)
        self._node_names = {node.name for node in nodes}
        self._memory_mechanism = memory_mechanism
        self._inherit_env = inherit_env
        self._active: dict[str, Tracked] = {}
        self._progress = ProgressReader()
        # Who gives up launches in claim.json: this backend, not just this process.
        self._identity = f"{os.getpid()}.{id(self):x}.{time.monotonic_ns()}"
        self._transport = LaunchTransport(state_dir, transport)
        self._masters = MasterPorts()
        self._preflight = preflight
        self._blocked: dict[str, Launch] = {}  # held by a failed check until stopped
        self._unstarted: list[Observation] = []  # exits of held launches that were stopped

    def nodes(self) -> list[NodeInfo]:
        return list(self._nodes)

    def launch(self, launch: Launch) -> None:
        """Write the launch record and spawn its supervisor; LaunchError if it cannot start."""
        check_launch(launch, self._node_names, self._inherit_env)
        if launch.launch_id in self._active:
            raise LaunchError(f"cannot launch {launch.launch_id!r}: that launch is already running")
        if self._preflight is not None and not self._preflight.admit(launch):
            return  # held while its node's check runs (`poll` starts it)
        self._start(launch)

    def _start(self, launch: Launch) -> None:
        env = self._transport.env(launch)
        if launch.master_key:  # every node is this machine: rank 0's port is free here
            # (probed before the launch dir exists: a refusal leaves nothing to clean)
            env["MASTER_PORT"] = self._masters.port(launch.job_id, launch.master_key,
                                                    local_port)
        directory = os.path.join(self._launches, launch.launch_id)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            raise LaunchError(
                f"launch id {launch.launch_id!r} was already used ({directory} exists); "
                "every launch needs a new id"
            ) from None
        try:
            statedir.write_json(
                os.path.join(directory, statedir.LAUNCH),
                {
                    "launch_id": launch.launch_id,
                    "job_id": launch.job_id,
                    "replica": launch.replica,
                    "node": launch.node,
                    "command": list(launch.command),
                    "env": env,
                    "inherit_env": self._inherit_env,
                    "cwd": os.path.abspath(launch.cwd),  # the supervisor runs in the launch dir
                    "memory_mb": launch.memory_mb,
                    "memory_mechanism": self._memory_mechanism,
                    "stdout": os.path.abspath(launch.log_prefix + ".out"),
                    "stderr": os.path.abspath(launch.log_prefix + ".err"),
                    "output": os.path.abspath(launch.log_prefix + ".log"),  # both, in order
                    "log_max_bytes": self._log_max_bytes,
                    "created": time.time(),
                },
            )
            spawner = self._spawner.send(directory)
        except BaseException:  # the disk is full, the spawner cannot start: nothing was sent,
            shutil.rmtree(directory, ignore_errors=True)  # so the same launch may try again
            raise
        self._active[launch.launch_id] = Tracked(
            launch.launch_id, launch.node, directory, spawner=spawner, sent_at=time.monotonic()
        )

    def prewarm(self) -> None:
        """Start filling the warm standby pool now (never blocks)."""
        self._spawner.prewarm()

    def warm_pool_status(self) -> dict[str, Any] | None:
        return statedir.read_json(os.path.join(self._launches, statedir.WARM_STATUS))

    def stop(self, stop: Stop) -> None:
        """Have the supervisor send `stop.signal` now and SIGKILL after `stop.grace` (never
        blocks)."""
        tracked = self._active.get(stop.launch_id)
        if tracked is None:
            self._never_started(stop.launch_id, stop.signal)
        elif not os.path.exists(tracked.exit_path):
            launchdir.stop(tracked.dir, stop.signal, max(0.0, stop.grace), stop.reason,
                           stop.notice, max(0.0, stop.delay))

    def _never_started(self, launch_id: str, sig: int) -> None:
        """A launch held by its node's check ends as if `sig` had ended it, never started."""
        held = self._blocked.pop(launch_id, None)
        if held is None and self._preflight is not None:
            held = self._preflight.drop(launch_id)
        if held is not None:
            self._unstarted.append(ReplicaExited(launch_id, 128 + sig, time.time(), signal=sig))

    def kill_node(self, node: str) -> None:
        """Chaos: SIGKILL every replica on `node` now (their exits come through poll)."""
        for tracked in list(self._active.values()):
            if tracked.node == node and not os.path.exists(tracked.exit_path):
                launchdir.stop(tracked.dir, signal.SIGKILL, 0.0, f"node {node} killed", None)
        for launch_id, launch in list(self._blocked.items()):
            if launch.node == node:
                self._never_started(launch_id, signal.SIGKILL)

    def poll(self) -> list[Observation]:
        observations, self._unstarted = self._unstarted, []
        if self._preflight is not None:
            self._checked(observations)
        now = time.monotonic()
        self._transport.ensure()
        for tracked in list(self._active.values()):
            self._observe(tracked, observations, now)
        return observations

    def _checked(self, out: list[Observation]) -> None:
        assert self._preflight is not None
        for verdict in self._preflight.poll():
            if not verdict.passed:
                out.append(NodeCheckFailed(verdict.node, verdict.message, time.time()))
                self._blocked.update((x.launch_id, x) for x in verdict.held)
                continue
            for launch in verdict.held:
                try:
                    self._start(launch)
                except Exception as exc:  # as the controller's launch would have said
                    out.append(LaunchFailed(launch.launch_id, str(exc), time.time(),
                                            user_error=getattr(exc, "user_error", False)))

    def _observe(self, tracked: Tracked, out: list[Observation], now: float) -> None:
        if not tracked.started and os.path.exists(tracked.status_path):
            self._report_started(tracked, out)
        if os.path.exists(tracked.exit_path):
            self._report_exit(tracked, out)
            return
        if tracked.started and (p := self._progress.read(tracked.launch_id, tracked.dir, now)):
            out.append(p)
        if now >= tracked.next_check and supervisor_gone(tracked, now, self._identity):
            # It may have written exit.json and exited between the two checks.
            if os.path.exists(tracked.exit_path):
                self._report_exit(tracked, out)
            else:
                self._report_lost(tracked, out)

    def _report_started(self, tracked: Tracked, out: list[Observation]) -> None:
        status = statedir.read_json(tracked.status_path)
        if status is None:
            return
        tracked.started, tracked.status = True, status
        if tracked.supervisor is None:
            tracked.supervisor = (status["supervisor_pid"], status["supervisor_start_ticks"])
        out.append(ReplicaStarted(tracked.launch_id, int(status["pid"]), status["started_at"]))

    def _report_exit(self, tracked: Tracked, out: list[Observation]) -> None:
        # What it reported last (a note, its last steps, flushed at its exit) comes first.
        if tracked.started and (p := self._progress.read(tracked.launch_id, tracked.dir,
                                                          time.monotonic(), final=True)):
            out.append(p)
        self._progress.forget(tracked.launch_id)
        self._active.pop(tracked.launch_id, None)
        record = statedir.read_json(tracked.exit_path) or {}
        if "exit_code" not in record and "spawn_error" not in record:
            record = {"spawn_error": f"{tracked.exit_path} is unreadable"}
        out.append(exit_observation(tracked.launch_id, record, None))

    def _report_lost(self, tracked: Tracked, out: list[Observation]) -> None:
        self._active.pop(tracked.launch_id, None)
        owner = statedir.read_json(os.path.join(tracked.dir, statedir.CLAIM)) or {}
        message = lost_message(tracked, owner, self._identity, self._spawner.log_path)
        out.append(LaunchFailed(tracked.launch_id, message, time.time()))
        status = tracked.status or statedir.read_json(tracked.status_path) or {}
        kill_leftovers(status, tracked.dir)

    def dump_stacks(self, launch_id: str, timeout: float = 10.0, nonblocking: bool = False
                    ) -> StackDump:
        status = self._active[launch_id].status if launch_id in self._active else {}
        if "pid" not in status:
            return StackDump(error=f"launch {launch_id} is not running here")
        return dump_pid(int(status["pid"]), timeout, nonblocking)

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        """Watch launches a previous controller started; never starts anything."""
        out: list[Observation] = []
        self._transport.ensure()
        for launch_id in launch_ids:
            if launch_id in self._active:
                continue
            why = self._track_adopted(launch_id)
            if why is None:
                self._observe(self._active[launch_id], out, time.monotonic())
            else:
                out.append(LaunchFailed(launch_id, f"launch {launch_id} {why}", time.time()))
        return out

    def _track_adopted(self, launch_id: str) -> str | None:
        """Watch a launch to adopt; why not, when it cannot be."""
        directory = os.path.join(self._launches, launch_id)
        spec = statedir.read_json(os.path.join(directory, statedir.LAUNCH))
        if spec is None or "/" in launch_id or launch_id in ("", ".", ".."):
            return (f"is unknown: {directory} has no launch record (the controller stopped "
                    "before writing it)")
        tracked = Tracked(launch_id, str(spec.get("node", "")), directory)
        if not os.path.exists(tracked.status_path) and not os.path.exists(tracked.exit_path):
            # Its supervisor may be starting, or may never have been spawned: claim the
            # launch as abandoned; a supervisor that comes later then starts nothing.
            owner = statedir.claim(directory, abandon_record(self._identity))
            if "abandoned_by" in owner:
                return ("never started: the controller stopped after writing its launch "
                        "record but before its supervisor ran")
            tracked.supervisor = (owner["supervisor_pid"], owner["supervisor_start_ticks"])
        self._active[launch_id] = tracked
        return None

    def close(self) -> None:
        """Stop watching; replicas keep running (a new backend can adopt them)."""
        self._active.clear()
        self._spawner.close()
        self._transport.close()
        if self._preflight is not None:
            self._preflight.close()
