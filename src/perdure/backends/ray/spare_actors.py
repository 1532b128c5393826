"""Spare launch actors, started on each node ahead of need: Ray starts a worker process for
every new actor, most of a warm restart's time; a launch that takes a spare starts within
milliseconds (`LaunchActor.begin`).

Each node keeps its slots' worth (twice that once a restart took some there: a node lost just
after a restart makes a second one), refilled a moment after a restart took them so the new
workers do not compete with it. `$PERDURE_RAY_SPARE_ACTORS`: "auto" (that, at most AUTO_MAX)
or a number per node from 0 (off) to MAX.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayError

from perdure.backends.ray import cluster as rc
from perdure.backends.ray import nslock
from perdure.backends.settings import AUTO, count_or_auto

ENV = "PERDURE_RAY_SPARE_ACTORS"
AUTO_MAX, MAX = 8, 64
REFILL_DELAY_SECONDS = 1.0
# A node whose spare died gets none this long: Ray's memory monitor kills the newest worker
# first, so a spare started again at once would die instead of the launch using the memory.
DIED_BACKOFF_SECONDS = 60.0
PREWARM_SECONDS = 60.0  # a held spare node's pool is asked to fill this often
PORT_AHEAD_SECONDS = 60.0  # a port found free ahead of a restart is used only this soon


def size_setting(raw: str | None = None) -> int | None:
    """Spares per node from `raw` or the environment: None for "auto"."""
    return count_or_auto(raw, ENV, MAX, lambda value: (
        f"${ENV}={value!r}: spare launch actors per Ray node must be {AUTO!r} (the node's "
        f"slots, at most {AUTO_MAX}) or an integer from 0 to {MAX}; 0 turns them off"))


class PortsAhead:
    """A free port asked of a node's agent ahead of the next group restart's rank 0."""

    def __init__(self) -> None:
        self._ahead: dict[str, tuple[float, Any]] = {}

    def take(self, node: str) -> str | None:
        got = self._ahead.pop(node, None)
        if got is None or time.monotonic() - got[0] > PORT_AHEAD_SECONDS:
            return None
        done, _ = ray.wait([got[1]], timeout=0)
        try:
            return str(int(ray.get(done[0], timeout=0))) if done else None
        except RayError:
            return None

    def ask(self, node: str, agent: Any) -> None:
        with contextlib.suppress(RayError):
            self._ahead[node] = (time.monotonic(), agent.free_port.remote())


@dataclass
class _Spare:
    name: str
    actor: Any
    watch: Any  # its `until_begun()` call: outstanding while idle, fails if it dies


class SpareActors:
    """The spare launch actors of one controller, per node."""

    def __init__(self, namespace: str, size: int | None,
                 warm: tuple[int | str, float] = ("auto", 600.0)) -> None:
        self.ns = namespace
        self.size = size
        self.warm = warm  # the node agents' pool settings (a spare looks its agent up early)
        self.owner: dict[str, str] | None = None  # the lock's name and token, once attached
        self._spares: dict[str, deque[_Spare]] = {}
        self._not_before: dict[str, float] = {}
        self._restarted: set[str] = set()  # nodes where a launch took a spare
        self.held: frozenset[str] = frozenset()  # spare nodes jobs hold (`hold_nodes`)
        self.fenced: frozenset[str] = frozenset()  # quarantined nodes: no spares there
        self._checks: dict[str, Any] = {}  # node -> its agent's answer to a checked prewarm
        self._next_prewarm = 0.0

    def attach(self, token: str) -> None:
        self.owner = {"lock": nslock.LOCK_NAME, "token": token}

    def want(self, node: str, slots: int) -> int:
        if self.size is not None:
            return self.size
        return min(slots * (2 if node in self._restarted else 1), AUTO_MAX)

    def fill(self, live: dict[str, rc.RayNode]) -> None:
        if self.owner is None:
            return
        for gone in set(self._spares) - set(live):
            self.forget(gone)
        now = time.monotonic()
        for name, node in live.items():
            if name in self.fenced:
                continue
            have = self._spares.setdefault(name, deque())
            if any(not self._alive(s) for s in have):
                have = self._spares[name] = deque(s for s in have if self._alive(s))
                self._not_before[name] = now + DIED_BACKOFF_SECONDS
            if now < self._not_before.get(name, 0.0):
                continue
            while len(have) < self.want(name, node.slots):
                actor_name = f"spare:{name}:{uuid.uuid4().hex[:12]}"
                try:
                    actor = rc.spare_launch_actor(name, actor_name, self.ns, {
                        **self.owner, "node": name, "warm": list(self.warm)})
                except (ValueError, RayError):
                    return  # tried again next fill
                have.append(_Spare(actor_name, actor, actor.until_begun.remote()))

    def hold(self, nodes: frozenset[str]) -> None:
        """The spare nodes jobs hold now: a change has their pools filled at the next poll."""
        if nodes != self.held:
            self.held, self._next_prewarm = nodes, 0.0

    def prewarm(self, live: dict[str, rc.RayNode], agent: Callable[[str], Any],
                check: dict[str, Any] | None = None) -> None:
        """Have the held spare nodes' agents fill their warm pools (now and then), after
        the preflight `check` when there is one."""
        now = time.monotonic()
        if not self.held or now < self._next_prewarm:
            return
        self._next_prewarm = now + PREWARM_SECONDS
        for node in sorted((self.held & set(live)) - self.fenced):
            with contextlib.suppress(RayError, ValueError):
                asked = {**check, "env": {"PERDURE_NODE": node}} if check else None
                ref = agent(node).prewarm.remote(asked)
                if check is not None:
                    self._checks[node] = ref

    def failed_checks(self) -> list[tuple[str, str]]:
        """(node, why) of the held spare nodes whose check failed since the last call."""
        if not self._checks:
            return []
        nodes = {ref: node for node, ref in self._checks.items()}
        ready, _ = ray.wait(list(nodes), num_returns=len(nodes), timeout=0)
        out = []
        for ref in ready:
            del self._checks[nodes[ref]]
            with contextlib.suppress(RayError):
                answer = ray.get(ref, timeout=0)
                if isinstance(answer, dict) and answer.get("passed") is False:
                    out.append((nodes[ref], str(answer.get("message"))))
        return out

    def fence(self, nodes: frozenset[str]) -> None:
        """The quarantined nodes now: no spares there."""
        for node in nodes - self.fenced:
            for spare in self._spares.pop(node, deque()):
                with contextlib.suppress(RayError, ValueError):
                    ray.kill(spare.actor)
        self.fenced = nodes

    def take(self, node: str) -> tuple[str, Any] | None:
        """A spare on `node` (the oldest: the likeliest to be running), or None."""
        have = self._spares.get(node)
        while have:
            spare = have.popleft()
            if self._alive(spare):
                self.refill_later(node, time.monotonic())
                return spare.name, spare.actor
        return None

    def refill_later(self, node: str, now: float) -> None:
        """Refill `node` REFILL_DELAY_SECONDS after the first take of a burst (a refill
        pushed back by every take would never come during one)."""
        self._restarted.add(node)
        if self._not_before.get(node, 0.0) <= now:
            self._not_before[node] = now + REFILL_DELAY_SECONDS

    @staticmethod
    def _alive(spare: _Spare) -> bool:
        done, _ = ray.wait([spare.watch], timeout=0)
        return not done

    def forget(self, node: str) -> None:
        self._spares.pop(node, None)
        self._not_before.pop(node, None)

    def close(self) -> None:
        for have in self._spares.values():
            for spare in have:
                with contextlib.suppress(RayError, ValueError):
                    ray.kill(spare.actor)
        self._spares.clear()
