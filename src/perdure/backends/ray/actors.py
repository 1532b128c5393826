"""The detached actor of one launch on its Ray node (`launch:<launch id>`, or a spare's name).

It runs the local backend's supervisor for its launch, so a replica on Ray has the local
backend's semantics; the supervisor dies with the actor (it watches the actor's process). The
launch goes to the node's agent (`nodeactor`) to start warm, else the actor starts it cold.
With `health: preflight`, a launch whose node failed the check answers `started` with the
check's words and ends, unstarted, when it is stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import ray

from perdure import statedir
from perdure.backends import launchdir
from perdure.backends.node import procs
from perdure.backends.node.nodeenv import interface_env
from perdure.backends.node.pulls import pull_launch
from perdure.backends.node.replicas import signal_replica
from perdure.backends.preflight import NodeGate, check_env
from perdure.backends.ray.nodeactor import node_actor, node_address, node_dir

AGENT_SECONDS = 5.0  # the node agent takes a launch within this, else it starts cold
CLAIM_SECONDS = 40.0  # the agent's spawner starts it within this (its template may import)
BEGIN_SECONDS = 30.0  # a call that comes before `begin` waits this long for it
IDLE_CHECK_SECONDS = 5.0  # how often a spare asks whether its controller holds the lock
IDLE_MISSES = 3  # it leaves after this many noes in a row (a loaded GCS may miss one)


def _in_supervisor() -> None:
    procs.load_libc()
    procs.set_parent_death_signal(signal.SIGKILL)


class LaunchActor:
    """Runs one replica under the local supervisor on this node; whichever supervisor
    claims the launch first (the agent's, or this actor's cold one) runs it."""

    def __init__(self, record: dict[str, Any] | None = None,
                 owner: dict[str, Any] | None = None) -> None:
        self._begun = threading.Event()
        self._begin_lock = threading.Lock()
        self._agent: Any = None  # a spare looks its node's agent up ahead of its launch
        self.prestarted = record is None  # a spare launch actor (`spare_actors`)
        if record is not None:
            self.begin(record)
        elif owner is not None:  # a spare: it waits for `begin`, or leaves with its owner
            threading.Thread(target=self._idle, args=(owner,), daemon=True).start()

    def until_begun(self) -> bool:
        """Answers once this spare has its launch (the call fails if the spare dies)."""
        self._begun.wait()
        return True

    def begin(self, record: dict[str, Any]) -> None:
        """Take the launch `record` and start its replica (a second call is ignored)."""
        with self._begin_lock:
            if self._begun.is_set():
                return
            self._setup(record)
            self._begun.set()

    def _setup(self, record: dict[str, Any]) -> None:
        self.created = time.time()  # the launch reached its node (for the recovery phases)
        self.launch_id = str(record["launch_id"])
        self.dir = os.path.join(node_dir(), statedir.LAUNCHES, self.launch_id)
        os.makedirs(self.dir, exist_ok=True)
        command = list(record["command"])
        if command[0] in ("python", "python3"):
            command[0] = sys.executable  # the interpreter of this node, not the controller's
        env = dict(record["env"])
        if record.get("gpus") and "CUDA_VISIBLE_DEVICES" in os.environ:
            # Ray chose this actor's GPUs: they win over the controller's guess.
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        if "PERDURE_TRANSPORT" not in env:  # without the relay, reports stay here to be pulled
            env["PERDURE_REPORT_DIR"] = self.dir
        # gloo and NCCL talk over the interface Ray reaches this node on (the user's own win)
        env.update({k: v for k, v in interface_env(node_address()).items() if k not in env})
        launchdir.write_launch(self.dir, {k: v for k, v in record.items() if k != "preflight"},
                               command, env, launchdir.identity(os.getpid()),
                               created=self.created)
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.via = "cold"
        self._exited = threading.Event()
        self._hold = threading.Lock()  # a stop and the check's end do not cross
        self.held = "preflight" in record  # until the node's check passed
        self.check_failed: str | None = None
        if self.held:
            threading.Thread(target=self._check, args=(record, env), daemon=True).start()
        else:
            self._start(record)

    def _start(self, record: dict[str, Any]) -> None:
        spawner = self._to_agent(str(record["node"]), record.get("warm") or ["auto", 600.0])
        if spawner is None:
            self._start_cold()
        else:
            self.via = "agent"
        threading.Thread(target=self._watch, args=(spawner,), daemon=True).start()

    def _check(self, record: dict[str, Any], env: dict[str, str]) -> None:
        """The node's check, by its agent (here when it does not answer); then the replica
        starts, or it is held until stopped."""
        check, node = record["preflight"], str(record["node"])
        argv, timeout = list(check["argv"]), float(check["timeout"])
        key = f"{record['job_id']}.{env.get('PERDURE_ATTEMPT', '')}"
        env, cwd = check_env(env, node), record.get("cwd")
        outcome: dict[str, Any] | None = None
        try:
            agent = self._agent or node_actor(node, ray.get_runtime_context().namespace,
                                              *(record.get("warm") or ["auto", 600.0]))
            while outcome is None:
                outcome = ray.get(agent.check.remote(key, argv, timeout, env, cwd, 1.0),
                                  timeout=AGENT_SECONDS)
        except Exception as err:  # a dead agent: the check runs here
            print(f"launch {self.launch_id}: the node agent did not check the node ({err}); "
                  "checking here", file=sys.stderr)
            gate = NodeGate(argv, timeout)
            while (got := gate.outcome(key, env, cwd, 1.0)) is None:
                pass
            outcome = {"passed": got.passed, "message": got.message}
        with self._hold:
            if not self.held:
                return  # stopped while the check ran
            if not outcome["passed"]:
                self.check_failed = str(outcome["message"])
                return
            self.held = False
        self._start(record)

    def _idle(self, owner: dict[str, Any]) -> None:
        """A spare with no launch leaves once its controller no longer holds the namespace
        lock: nothing else ends a detached actor."""
        with contextlib.suppress(Exception):  # else looked up when the launch comes
            self._agent = node_actor(owner["node"], ray.get_runtime_context().namespace,
                                     *owner["warm"])
        misses = 0
        while not self._begun.wait(IDLE_CHECK_SECONDS):
            misses = 0 if _lock_token(owner["lock"]) == owner["token"] else misses + 1
            if misses >= IDLE_MISSES:
                with self._begin_lock:  # no launch begins while it goes
                    if not self._begun.is_set():
                        os._exit(0)

    def _began(self, timeout: float = BEGIN_SECONDS) -> bool:
        """Whether the launch has begun (Ray does not keep the calls' order in a threaded
        actor: one may come before `begin`)."""
        return self._begun.wait(timeout)

    def _to_agent(self, node: str, warm: list[Any]) -> dict[str, int] | None:
        """Hand the launch to the node agent's spawner; its process, or None (start cold)."""
        try:
            agent = self._agent or node_actor(node, ray.get_runtime_context().namespace, *warm)
            spawner: dict[str, int] = ray.get(agent.spawn.remote(self.dir),
                                              timeout=AGENT_SECONDS)
            return spawner
        except Exception as err:  # a dead agent, a spawner that failed: start cold
            print(f"launch {self.launch_id}: the node agent did not take it ({err}); "
                  "starting cold", file=sys.stderr)
            return None

    def _start_cold(self) -> None:
        log = open(os.path.join(self.dir, statedir.SUPERVISOR_LOG), "ab")  # noqa: SIM115
        self.supervisor = subprocess.Popen(
            [sys.executable, "-m", "perdure.backends.node.supervisor", self.dir],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_in_supervisor,
            close_fds=True,
        )
        log.close()

    def _watch(self, spawner: dict[str, int] | None) -> None:
        """Set `_exited` when the supervisor that claimed the launch is gone."""
        deadline = time.monotonic() + CLAIM_SECONDS
        while (claim := self._read(statedir.CLAIM)) is None:
            if self.supervisor is not None and self.supervisor.poll() is not None:
                break  # ours exited before claiming (a broken install)
            if self.supervisor is None and (time.monotonic() >= deadline or not (
                    spawner and procs.is_alive(spawner["pid"], spawner["start_ticks"]))):
                print(f"launch {self.launch_id}: the node agent's spawner did not start it; "
                      "starting cold", file=sys.stderr)
                self._start_cold()
            time.sleep(0.01)
        if claim is not None and claim.get("supervisor_pid"):
            pid = int(claim["supervisor_pid"])
            if self.supervisor is not None and pid == self.supervisor.pid:
                self.supervisor.wait()
            else:
                procs.wait_gone(pid, int(claim["supervisor_start_ticks"]))
        self._exited.set()

    def _read(self, name: str) -> dict[str, Any] | None:
        return statedir.read_json(os.path.join(self.dir, name))

    def started(self, timeout: float) -> dict[str, Any] | None:
        """Wait up to `timeout` s for the replica to start: its status record, else None."""
        deadline = time.monotonic() + timeout
        if not self._began(timeout):
            return None
        while time.monotonic() < deadline:
            status = self._read(statedir.STATUS)
            if status is not None:  # and how it came to start, for the recovery phases
                return {**status, "actor_created": self.created, "via": self.via,
                        "prestarted": self.prestarted}
            if self.check_failed is not None:
                return {"check_failed": self.check_failed}
            if self._exited.is_set():
                return None
            time.sleep(0.02)
        return None

    def exit_record(self, timeout: float) -> dict[str, Any] | None:
        """Wait up to `timeout` s for the replica's end: exit.json (or why there is none)."""
        began = time.monotonic()
        if self._began(timeout) and self._exited.wait(max(0.0, timeout - (time.monotonic()
                                                                           - began))):
            record = self._read(statedir.EXIT)
            if record is not None:
                return record
            code = "" if self.supervisor is None else f" ({self.supervisor.returncode})"
            return launchdir.supervisor_lost(self.dir, node_address(), code)
        return None

    def stop(self, sig: int, grace: float, reason: str, notice: str | None,
             delay: float = 0.0) -> None:
        if not self._began():
            return
        if os.path.exists(os.path.join(self.dir, statedir.EXIT)):
            return
        with self._hold:
            if self.held:  # never started: it ends unstarted
                self.held = False
                launchdir.end_unstarted(self.dir, sig, reason)
                self._exited.set()
                return
        launchdir.stop(self.dir, sig, grace, reason, notice, delay)

    def signal(self, sig: int) -> int:
        """Signal the replica's own process (chaos); its pid; ProcessLookupError if gone."""
        if not self._began():
            raise ProcessLookupError("this launch actor was never given its launch")
        return signal_replica(node_dir(), self.launch_id, sig)

    def pull(self, offsets: dict[str, int]) -> dict[str, bytes]:
        if not self._began():
            return {}
        return pull_launch(self.dir, offsets)

    def release(self) -> None:
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]


def _lock_token(name: str) -> str | None:
    try:
        lock = ray.get_actor(name, namespace=ray.get_runtime_context().namespace)
        held: Any = ray.get(lock.holder.remote(), timeout=10)
        return str(held.get("token"))
    except Exception:  # gone, dying, or not answering: counted as a miss
        return None


