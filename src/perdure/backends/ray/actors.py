"""What runs on the Ray nodes: one detached actor per launch, one agent per perdure node.

`LaunchActor` (named `launch:<launch id>`) runs the local backend's supervisor for its launch
in a launch directory on its own node, so a replica on Ray has exactly the local backend's
semantics: exit code and signal, the error file (written and read on that node), OOM over
`memory_mb`, stop with grace then SIGKILL of the whole process group, the stop notice file.
It outlives the controller (detached) and the supervisor dies with it (PDEATHSIG). It keeps
the launch's logs and progress reports on its node; the controller pulls them (`pull`).

`NodeAgent` (named `agent:<node>`) answers what a node knows: its address and interpreter,
and a port that is free there.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import ray

from perdure.backends.local import layout
from perdure.backends.local.replicas import kill_leftovers, signal_replica

PULL_LIMIT = 1 << 20  # bytes of one stream per pull: a pull is one small message
FILES = {"out": "stdout.log", "err": "stderr.log", "progress": "progress.jsonl"}


def node_address() -> str:
    """The address Ray reaches this node at."""
    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def node_dir() -> str:
    """This Ray node's own directory for perdure (inside its session dir: nothing shared)."""
    try:
        from ray._private import worker  # the session dir has no public accessor

        base = worker._global_node.get_session_dir_path()  # type: ignore[attr-defined,union-attr]
    except Exception:
        base = tempfile.gettempdir()
    path = os.path.join(base, "perdure")
    os.makedirs(os.path.join(path, layout.LAUNCHES), exist_ok=True)
    return path


def network_env() -> dict[str, str]:
    """Make gloo and NCCL talk over the interface Ray reaches this node on.

    Left alone they bind to the address the host name resolves to, often 127.0.0.1: peers on
    other hosts could not connect. The user's own settings win.
    """
    import psutil

    address = node_address()
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name,
                    "TP_SOCKET_IFNAME": name}
    return {}


def pull_launch(directory: str, offsets: dict[str, int]) -> dict[str, bytes]:
    """New bytes of a launch's logs and progress reports since `offsets` (per stream)."""
    out = {}
    for stream, name in FILES.items():
        try:
            with open(os.path.join(directory, name), "rb") as f:
                f.seek(offsets.get(stream, 0))
                out[stream] = f.read(PULL_LIMIT)
        except FileNotFoundError:
            out[stream] = b""
    return out


def _in_supervisor() -> None:
    # The supervisor dies with this actor: a killed actor (node death, ray.kill, the memory
    # monitor) takes its replica with it, whose own PDEATHSIG follows the supervisor.
    from perdure.backends.local import procs

    procs.load_libc()
    procs.set_parent_death_signal(signal.SIGKILL)


class LaunchActor:
    """Runs one replica under the local supervisor on this node (see the module docstring)."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.launch_id = str(record["launch_id"])
        self.dir = os.path.join(node_dir(), layout.LAUNCHES, self.launch_id)
        os.makedirs(self.dir, exist_ok=True)
        command = list(record["command"])
        if command[0] in ("python", "python3"):
            command[0] = sys.executable  # the interpreter of this node, not the controller's
        env = dict(record["env"])
        if "PERDURE_TRANSPORT" not in env:  # without the relay, reports stay here to be pulled
            env["PERDURE_REPORT_DIR"] = self.dir
        env.update({k: v for k, v in network_env().items() if k not in env})
        spec = {
            **record,
            "command": command,
            "env": env,
            "inherit_env": True,
            "memory_mechanism": record.get("memory_mechanism", "auto"),
            "stdout": os.path.join(self.dir, FILES["out"]),
            "stderr": os.path.join(self.dir, FILES["err"]),
            "created": time.time(),
        }
        layout.write_json(os.path.join(self.dir, layout.LAUNCH), spec)
        log = open(os.path.join(self.dir, layout.SUPERVISOR_LOG), "ab")  # noqa: SIM115
        self.supervisor = subprocess.Popen(
            [sys.executable, "-m", "perdure.backends.local.supervisor", self.dir],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_in_supervisor,
            close_fds=True,
        )
        log.close()
        self._exited = threading.Event()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        self.supervisor.wait()
        self._exited.set()

    def _read(self, name: str) -> dict[str, Any] | None:
        return layout.read_json(os.path.join(self.dir, name))

    def where(self) -> dict[str, Any]:
        """The node this launch runs on (address, pid of the actor) and its directory."""
        return {"address": node_address(), "pid": os.getpid(), "dir": self.dir}

    def started(self, timeout: float) -> dict[str, Any] | None:
        """Wait up to `timeout` s for the replica to start: its status record, else None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self._read(layout.STATUS)
            if status is not None:
                return status
            if self._exited.is_set():
                return None
            time.sleep(0.02)
        return None

    def exit_record(self, timeout: float) -> dict[str, Any] | None:
        """Wait up to `timeout` s for the replica's end: exit.json (or why there is none)."""
        if self._exited.wait(timeout):
            record = self._read(layout.EXIT)
            if record is not None:
                return record
            code = self.supervisor.returncode
            kill_leftovers(self._read(layout.STATUS) or {}, self.dir)
            return {"spawn_error": f"the supervisor of launch {self.launch_id} exited "
                                   f"({code}) without recording the replica's exit; see "
                                   f"{os.path.join(self.dir, layout.SUPERVISOR_LOG)} on "
                                   f"{node_address()}",
                    "time": time.time()}
        return None

    def stop(self, sig: int, grace: float, reason: str, notice: str | None) -> None:
        """Write the stop request (the runtime reads it) and tell the supervisor."""
        if os.path.exists(os.path.join(self.dir, layout.EXIT)):
            return
        layout.write_json(os.path.join(self.dir, layout.STOP), {
            "signal": int(sig), "deadline": time.time() + grace, "reason": reason,
            "notice": notice})
        if os.path.exists(os.path.join(self.dir, layout.STATUS)):
            self.supervisor.send_signal(signal.SIGUSR1)

    def signal(self, sig: int) -> int:
        """Signal the replica's own process (chaos); its pid; ProcessLookupError if gone."""
        return signal_replica(node_dir(), self.launch_id, sig)

    def pull(self, offsets: dict[str, int]) -> dict[str, bytes]:
        """New bytes of the logs and progress reports since `offsets` (per stream)."""
        return pull_launch(self.dir, offsets)

    def release(self) -> None:
        """The controller has everything: end this actor (the launch dir stays on the node)."""
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]


class NodeAgent:
    """What a perdure node knows about itself, for the controller."""

    def info(self) -> dict[str, Any]:
        return {"address": node_address(), "python": sys.executable,
                "node_id": ray.get_runtime_context().get_node_id(), "dir": node_dir()}

    def pull(self, launch_id: str, offsets: dict[str, int]) -> dict[str, bytes]:
        """A launch's streams, as `LaunchActor.pull`, once its actor is gone (killed by
        Ray's memory monitor, say): what the replica printed last is still on this node."""
        if os.sep in launch_id or launch_id in ("", ".", ".."):
            raise ValueError(f"not a launch id: {launch_id!r}")
        return pull_launch(os.path.join(node_dir(), layout.LAUNCHES, launch_id), offsets)

    def free_port(self) -> int:
        """A port nothing listens on now on this node (the OS picks it: no clash)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # Never listens: asks the OS for a port free on every interface, as rank 0's
            # TCPStore (torch binds it on every interface) will need it.
            s.bind(("", 0))
            return int(s.getsockname()[1])
