"""Spare launch actors: launch actors started on each node ahead of need.

Ray starts a worker process for every new actor, most of a warm restart on Ray; a launch that
takes a spare instead has its replica starting within milliseconds of the call
(`LaunchActor.begin`). Each live node keeps up to `size` spares, by default its slots (a group
restart relaunches at most that many there at once), and twice its slots once a restart has
taken spares there: a node lost just after a restart makes a second restart at once. Spares
taken are replaced a moment after the first of them, once the restart's own launches are on
their way, so the new workers do not compete with them.

A spare is a detached actor named `spare:<node>:<token>`; the launch it takes keeps that name
in its record, so a controller that restarts finds it again (`cluster.find_launch`). A spare
nobody took leaves by itself once its controller no longer holds the namespace lock, and
`close` kills those of a controller that stops.

Settings: `$PERDURE_RAY_SPARE_ACTORS` ("auto": each node's slots, twice that once a restart took
some there, at most AUTO_MAX; a number from 0 to MAX: that many per node; 0 turns them off).
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
# A node whose spare was just taken gets its replacement this much later: the worker Ray
# starts for it would otherwise compete for the CPUs with the restart that took the spare.
REFILL_DELAY_SECONDS = 1.0
# A node whose spare died (Ray's memory monitor kills the newest worker first, which may be a
# spare rather than the launch that uses the memory) gets none for this long: a spare started
# again at once would be killed again, and the monitor would never reach the launch.
DIED_BACKOFF_SECONDS = 60.0
# A spare node's warm pool is asked to fill this often (each ask also keeps it from emptying
# for want of launches, as a pool does after its idle time).
PREWARM_SECONDS = 60.0
# A port a node's agent found free is used for the next group restart's rank 0 there only
# this soon after (the same bet on a port staying free as asking at launch, over a minute).
PORT_AHEAD_SECONDS = 60.0


def size_setting(raw: str | None = None) -> int | None:
    """Spares per node from `raw` or the environment: None for "auto" (the node's slots);
    ValueError naming the variable otherwise."""
    return count_or_auto(raw, ENV, MAX, lambda value: (
        f"${ENV}={value!r}: spare launch actors per Ray node must be {AUTO!r} (the node's "
        f"slots, at most {AUTO_MAX}) or an integer from 0 to {MAX}; 0 turns them off"))


class PortsAhead:
    """A free port asked of a node's agent ahead of the next group restart (each restart's
    rank 0 needs a new one), so that restart's first launch does not wait for the answer."""

    def __init__(self) -> None:
        self._ahead: dict[str, tuple[float, Any]] = {}

    def take(self, node: str) -> str | None:
        """The port asked of `node` ahead, if it came back in time; else None (ask now)."""
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
    """The spare launch actors of one controller, per node (see the module docstring)."""

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
        """Start spares on live nodes that have fewer than they want (never waits)."""
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
        """The spare nodes jobs hold now: their pools are asked to fill at the next poll."""
        self.held, self._next_prewarm = nodes, 0.0

    def prewarm(self, live: dict[str, rc.RayNode], agent: Callable[[str], Any],
                check: dict[str, Any] | None = None) -> None:
        """Have the held spare nodes' agents fill their warm pools (now and then); with
        `check` (the cluster file's preflight: argv, timeout), once the node passed it."""
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
        """The quarantined nodes now: their spares are killed and none is started there
        until they are restored."""
        for node in nodes - self.fenced:
            for spare in self._spares.pop(node, deque()):
                with contextlib.suppress(RayError, ValueError):
                    ray.kill(spare.actor)
        self.fenced = nodes

    def take(self, node: str) -> tuple[str, Any] | None:
        """A spare on `node` (the oldest: the likeliest to be running), or None."""
        have = self._spares.get(node)
        if not have:
            return None
        while have:
            spare = have.popleft()
            if self._alive(spare):
                self.refill_later(node, time.monotonic())
                return spare.name, spare.actor
        return None

    def refill_later(self, node: str, now: float) -> None:
        """A spare of `node` was taken at `now`: refill it REFILL_DELAY_SECONDS after the first
        take of a burst (a refill pushed back by every take would never come during one)."""
        self._restarted.add(node)
        if self._not_before.get(node, 0.0) <= now:
            self._not_before[node] = now + REFILL_DELAY_SECONDS

    @staticmethod
    def _alive(spare: _Spare) -> bool:
        """False for a spare whose start failed, that died or that left (its watch ended)."""
        done, _ = ray.wait([spare.watch], timeout=0)
        return not done

    def forget(self, node: str) -> None:
        """A node that is lost takes its spares with it."""
        self._spares.pop(node, None)
        self._not_before.pop(node, None)

    def close(self) -> None:
        """Kill the spares nobody took (a launch's actor is never among them)."""
        for have in self._spares.values():
            for spare in have:
                with contextlib.suppress(RayError, ValueError):
                    ray.kill(spare.actor)
        self._spares.clear()
