"""The node's agent on Ray: one detached actor per perdure node and namespace, `node:<node>`.

It owns the node's spawner with its warm pool (launch actors hand their launches to it), runs
the node's preflight check, and answers what the node knows (address, a free port).

Side effects: the spawner and its standbys, the check's processes, this node's perdure dir.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading
from typing import Any

import ray

from perdure import statedir
from perdure.backends.launchdir import identity
from perdure.backends.masterport import local_port
from perdure.backends.node.pulls import pull_launch
from perdure.backends.preflight import NodeGate

RESOURCE_PREFIX = "perdure_node_"
PIN = 0.001  # of its node's resource: pins an actor there, taking no slot
ACTOR_CONCURRENCY = 16  # threads per actor: a wait for an exit must not block a stop


def node_address() -> str:
    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def node_dir() -> str:
    """This Ray node's own directory for perdure, one per namespace, in its session dir."""
    try:
        from ray._private import worker  # the session dir has no public accessor

        base = worker._global_node.get_session_dir_path()  # type: ignore[attr-defined,union-attr]
    except Exception:
        base = tempfile.gettempdir()
    namespace = ray.get_runtime_context().namespace.replace(os.sep, "_")
    path = os.path.join(base, "perdure", namespace)
    os.makedirs(os.path.join(path, statedir.LAUNCHES), exist_ok=True)
    return path


class NodeActor:

    def __init__(self, warm_pool: int | str = "auto", warm_idle: float = 600.0) -> None:
        from perdure.backends.node.spawner import Spawner

        self.launches = os.path.join(node_dir(), statedir.LAUNCHES)
        self._spawner = Spawner(self.launches, warm_pool, warm_idle)
        self._lock = threading.Lock()  # calls run in threads of their own
        self._gates: dict[tuple[tuple[str, ...], float], NodeGate] = {}

    def spawn(self, directory: str) -> dict[str, int]:
        """Have the spawner start the launch in `directory`; the spawner's process."""
        with self._lock:
            pid = self._spawner.send(directory).pid
        return identity(pid)

    def check(self, key: str, argv: list[str], timeout: float, env: dict[str, str],
              cwd: str | None, wait: float) -> dict[str, Any] | None:
        """The outcome of the node's check for `key` (`NodeGate.outcome`)."""
        with self._lock:
            gate = self._gates.setdefault((tuple(argv), timeout), NodeGate(argv, timeout))
        outcome = gate.outcome(key, env, cwd, wait)
        return None if outcome is None else {"passed": outcome.passed,
                                             "message": outcome.message}

    def prewarm(self, check: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Start filling the warm pool now; with `check`, once the node passed it (the
        check's outcome)."""
        outcome = None
        if check is not None:
            argv, timeout = list(check["argv"]), float(check["timeout"])
            outcome = self.check("spare", argv, timeout, dict(check["env"]), None,
                                 timeout + 5.0)
            if outcome is None or not outcome["passed"]:
                return outcome
        with self._lock:
            self._spawner.prewarm()
        return outcome

    def warm_status(self) -> dict[str, Any] | None:
        """The pool as the spawner last wrote it (`pool.Pool._write_status`), or None."""
        return statedir.read_json(os.path.join(self.launches, statedir.WARM_STATUS))

    def info(self) -> dict[str, Any]:
        return {"address": node_address(), "python": sys.executable}

    def pull(self, launch_id: str, offsets: dict[str, int]) -> dict[str, bytes]:
        """A launch's streams, as `LaunchActor.pull`, once its actor is gone."""
        if os.sep in launch_id or launch_id in ("", ".", ".."):
            raise ValueError(f"not a launch id: {launch_id!r}")
        return pull_launch(os.path.join(self.launches, launch_id), offsets)

    def free_port(self) -> int:
        return int(local_port())


def node_actor(node: str, namespace: str, warm_pool: int | str = "auto",
               warm_idle: float = 600.0) -> Any:
    """The node's agent, created on first use; Ray starts it again when it dies."""
    return remote_class(NodeActor).options(
        name=f"node:{node}", namespace=namespace, lifetime="detached", get_if_exists=True,
        resources={RESOURCE_PREFIX + node: PIN}, num_cpus=0, max_restarts=-1,
        max_concurrency=ACTOR_CONCURRENCY,
    ).remote(warm_pool, warm_idle)


@functools.cache
def remote_class(cls: type) -> Any:
    """The Ray actor class of `cls`, made once per process."""
    return ray.remote(cls)
