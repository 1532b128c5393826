"""The node agent: one per node of an allocation (a Slurm step, a Kubernetes pod), owning
that node's replicas through the local backend's spawner and supervisor.

It connects to the controller's hub and pushes a report every PUSH_SECONDS (its heartbeat):
each launch's status and exit once, and the new bytes of its logs and progress; an exit only
in a report that brings none of its bytes, so the controller has the whole log by then.
SIGTERM (a preemption's notice) is reported, not obeyed. With `health: preflight` its launches
start only once the node's check passed; a failed check is reported and they never start.

Side effects: processes (the spawner, supervisors, replicas), the launch directories, a TCP
connection to the hub.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from perdure import statedir
from perdure.backends import launchdir
from perdure.backends.agents.nodedir import AGENT_ROLE, PREFLIGHT_ENV, SECRET_ENV, node_dir
from perdure.backends.masterport import local_port
from perdure.backends.node import procs
from perdure.backends.node.nodeenv import interface_env, node_command
from perdure.backends.node.pulls import pull_launch
from perdure.backends.node.spawner import Spawner
from perdure.runtime.transport.wire import FrameError, mac, parse_addr, recv_frame, send_frame

if TYPE_CHECKING:
    from perdure.backends.preflight import Outcome

PUSH_SECONDS = 0.2
CHUNK = 128 << 10  # bytes of one stream per report (a report stays well under a frame)
BUDGET = 512 << 10  # bytes of all streams in one report
CLAIM_SECONDS = 60.0  # a launch unclaimed this long never started


class _Launch:
    def __init__(self, directory: str, offsets: dict[str, int]) -> None:
        self.dir = directory
        self.offsets = dict(offsets)
        self.sent_status = False
        self.sent_exit = False
        self.since = time.monotonic()
        self.held = False  # waits for the node's check


class HubAgent:
    def __init__(self, hub: str, node: str, warm_pool: str, warm_idle: float,
                 alloc: str) -> None:
        self.hub = parse_addr(hub, "hub")
        self.node = node
        self.alloc = alloc  # what it speaks for: its Slurm job, its pod
        self.secret = os.environ.pop(SECRET_ENV, "")
        self.launches_dir = os.path.join(node_dir(node), statedir.LAUNCHES)
        os.makedirs(self.launches_dir, exist_ok=True)
        self.spawner = Spawner(self.launches_dir, int(warm_pool) if warm_pool.isdigit()
                               else warm_pool, warm_idle)
        self.launches: dict[str, _Launch] = {}
        self.lock = threading.Lock()
        self.spawn_lock = threading.Lock()  # the spawner is fed from two threads
        check = json.loads(os.environ.pop(PREFLIGHT_ENV, "") or "null")
        self.check: dict[str, Any] | None = check
        self.checked: Outcome | None = None  # the node's check, once it ended
        self.sent_check = False
        self.notice: str | None = None
        self.address = ""
        self.identity = launchdir.identity(os.getpid())

    # ---- connection -------------------------------------------------------------------------

    def connect(self) -> socket.socket:
        sock = socket.create_connection(self.hub, timeout=5)
        nonce = str(recv_frame(sock, limit=4096)["nonce"])
        self.address = sock.getsockname()[0]
        send_frame(sock, {"alloc": self.alloc, "node": self.node, "address": self.address,
                          "mac": mac(self.secret, nonce, self.alloc, self.node, AGENT_ROLE)})
        answer = recv_frame(sock, limit=4096)
        if not answer.get("ok"):
            raise ConnectionError(f"the hub refused this agent: {answer.get('error')}")
        sock.settimeout(None)
        return sock

    def serve(self) -> None:
        if self.check is None:
            self.spawner.prewarm()
        else:
            threading.Thread(target=self._preflight, daemon=True, name="preflight").start()
        while True:
            try:
                sock = self.connect()
            except (OSError, FrameError, KeyError):
                time.sleep(0.5)
                continue
            lock = threading.Lock()
            reader = threading.Thread(target=self._read, args=(sock, lock), daemon=True)
            reader.start()
            try:
                while reader.is_alive():
                    report = self._report()
                    with lock:
                        send_frame(sock, report)
                    self._sent(report)
                    time.sleep(PUSH_SECONDS)
            except OSError:
                pass
            sock.close()
            with self.lock:  # the next controller says what it already has (sync)
                self.sent_check = False
                for launch in self.launches.values():
                    launch.sent_status = launch.sent_exit = False

    def _preflight(self) -> None:
        """Run the node's check; then fill the warm pool and start the held launches, or
        hold them for good."""
        from perdure.backends.preflight import NodeGate  # only where a check is asked for

        assert self.check is not None
        gate = NodeGate(self.check["argv"], float(self.check["timeout"]))
        env = {**dict(self.check.get("env") or {}), "PERDURE_NODE": self.node}
        while (outcome := gate.outcome("attempt", env, self.check.get("cwd"), 1.0)) is None:
            pass
        with self.lock:
            self.checked = outcome
            held = [x for x in self.launches.values() if x.held] if outcome.passed else []
            for launch in held:
                launch.held, launch.since = False, time.monotonic()
        if outcome.passed:
            with self.spawn_lock:
                self.spawner.prewarm()
                for launch in held:
                    self.spawner.send(launch.dir)

    def _read(self, sock: socket.socket, lock: threading.Lock) -> None:
        try:
            while True:
                frame = recv_frame(sock)
                answer = self._obey(frame)
                if answer is not None and "rid" in frame:
                    with lock:
                        send_frame(sock, {**answer, "rid": frame["rid"]})
        except (OSError, FrameError):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # ---- what the controller asks -------------------------------------------------------------

    def _obey(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        op = frame.get("op")
        if op == "launch":
            self._launch(frame["record"])
        elif op == "track":  # after a controller restart: what it has of each launch
            with self.lock:
                for lid, offsets in dict(frame["launches"]).items():
                    directory = os.path.join(self.launches_dir, str(lid))
                    if os.path.isdir(directory):
                        was = self.launches.get(str(lid))
                        launch = self.launches[str(lid)] = _Launch(directory, offsets)
                        launch.held = was is not None and was.held  # still waits for the check
        elif op == "stop":
            self._stop(str(frame["launch_id"]), int(frame["signal"]), float(frame["grace"]),
                       str(frame.get("reason", "")), frame.get("notice"))
        elif op == "forget":
            with self.lock:
                self.launches.pop(str(frame["launch_id"]), None)
        elif op == "port":
            return {"port": int(local_port())}
        return None

    def _launch(self, record: dict[str, Any]) -> None:
        lid = str(record["launch_id"])
        if os.sep in lid or lid in ("", ".", ".."):
            return
        directory = os.path.join(self.launches_dir, lid)
        if os.path.exists(os.path.join(directory, statedir.LAUNCH)):
            return  # sent again after a reconnect: it runs already
        os.makedirs(directory, exist_ok=True)
        env = dict(record["env"])
        env.update({k: v for k, v in interface_env(self.address).items() if k not in env})
        if "CUDA_VISIBLE_DEVICES" in env:
            env["CUDA_VISIBLE_DEVICES"] = replica_gpus(env["CUDA_VISIBLE_DEVICES"],
                                                       os.environ.get("CUDA_VISIBLE_DEVICES"))
        launchdir.write_launch(
            directory, record, node_command(list(record["command"])), env, self.identity,
            # Slurm signals the whole step on a preemption: the replica gets the job's grace
            self_stop_grace=float(env.get("PERDURE_GRACE_SECONDS", "10")),
            preflight_timeout=float(self.check["timeout"]) if self.check else 0.0)
        with self.lock:
            launch = self.launches[lid] = _Launch(directory, {})
            launch.held = self.check is not None and not (self.checked and self.checked.passed)
        if not launch.held:
            with self.spawn_lock:
                self.spawner.send(directory)

    def _stop(self, lid: str, sig: int, grace: float, reason: str, notice: Any) -> None:
        directory = os.path.join(self.launches_dir, lid)
        if not os.path.isdir(directory) or os.path.exists(os.path.join(directory, statedir.EXIT)):
            return
        with self.lock:
            launch = self.launches.get(lid)
            if launch is not None and launch.held:  # never started: it ends unstarted
                launch.held = False
                launchdir.end_unstarted(directory, sig, reason)
                return
        launchdir.stop(directory, sig, grace, reason, notice)

    # ---- reports ----------------------------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        budget = BUDGET
        items: dict[str, Any] = {}
        with self.lock:
            launches = list(self.launches.items())
        for lid, launch in launches:
            item: dict[str, Any] = {}
            if not launch.sent_status:
                status = statedir.read_json(os.path.join(launch.dir, statedir.STATUS))
                if status is not None:
                    item["status"] = status
            if budget <= 0:  # the rest next time; its exit waits for its bytes
                if item:
                    items[lid] = item
                continue
            chunks = pull_launch(launch.dir, launch.offsets, min(CHUNK, budget))
            chunks = {k: v for k, v in chunks.items() if v}
            budget -= sum(len(v) for v in chunks.values())
            if chunks:
                item["chunks"] = {k: base64.b64encode(v).decode() for k, v in chunks.items()}
                item["offsets"] = dict(launch.offsets)
            elif not launch.sent_exit:
                ended = self._ended(launch)
                if ended is not None:
                    item["exit"] = ended
            if item:
                items[lid] = item
        report: dict[str, Any] = {"t": "report", "launches": items}
        if self.checked is not None and not self.checked.passed and not self.sent_check:
            report["check_failed"] = self.checked.message
        if self.notice is not None:
            report["notice"] = self.notice
        return report

    def _ended(self, launch: _Launch) -> dict[str, Any] | None:
        record = statedir.read_json(os.path.join(launch.dir, statedir.EXIT))
        if record is not None:
            return record
        if launch.held:
            return None
        claim = statedir.read_json(os.path.join(launch.dir, statedir.CLAIM))
        if claim is None:
            if time.monotonic() - launch.since < CLAIM_SECONDS:
                return None
            return {"spawn_error": f"no supervisor started launch {launch.dir} on node "
                                   f"{self.node} within {CLAIM_SECONDS:g}s", "time": time.time()}
        pid = int(claim.get("supervisor_pid") or 0)
        if pid and procs.is_alive(pid, int(claim.get("supervisor_start_ticks") or 0)):
            return None
        record = statedir.read_json(os.path.join(launch.dir, statedir.EXIT))  # raced its write
        if record is not None:
            return record
        return launchdir.supervisor_lost(launch.dir, f"node {self.node}")

    def _sent(self, report: dict[str, Any]) -> None:
        with self.lock:
            self.sent_check = self.sent_check or "check_failed" in report
            for lid, item in report["launches"].items():
                launch = self.launches.get(lid)
                if launch is None:
                    continue
                launch.sent_status = launch.sent_status or "status" in item
                launch.sent_exit = launch.sent_exit or "exit" in item
                for stream, data in item.get("chunks", {}).items():
                    launch.offsets[stream] = (launch.offsets.get(stream, 0)
                                              + len(base64.b64decode(data)))


def replica_gpus(chosen: str, own: str | None) -> str:
    """A replica's CUDA_VISIBLE_DEVICES: the step's own GPUs (`own`, "4,5,6,7") at the
    positions the controller chose (`chosen`, "1,2" -> "5,6"). No side effects."""
    if own is None or not chosen.strip():
        return chosen
    ids = [x for x in own.split(",") if x]
    out = []
    for word in chosen.split(","):
        word = word.strip()
        out.append(ids[int(word)] if word.isdigit() and int(word) < len(ids) else word)
    return ",".join(out)


def main(argv: list[str] | None = None, module: str = "perdure.backends.agents.agent",
         alloc_env: str = "SLURM_JOB_ID", missing: str | None = None) -> None:
    """Run the agent of the allocation `$alloc_env` names (`missing`: the error when unset)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        sys.exit(f"usage: python -m {module} HUB NODE WARM_POOL WARM_IDLE")
    if missing is not None and not os.environ.get(alloc_env):
        sys.exit(missing)
    agent = HubAgent(args[0], args[1], args[2], float(args[3]), os.environ.get(alloc_env, ""))

    def on_term(signum: int, frame: Any) -> None:
        agent.notice = "preempt"  # the platform's preemption notice; the controller decides

    signal.signal(signal.SIGTERM, on_term)
    agent.serve()


if __name__ == "__main__":
    main()
