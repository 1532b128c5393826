"""One launch as the Ray backend follows it, and the copying of its logs and progress into
the controller's state dir: while it runs without blocking, then the rest once it ended.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayError

from perdure.backends.node.mirror import Mirror
from perdure.backends.ray import replies

PULL_SECONDS = 0.5  # how often logs and progress are copied while a launch runs
AGENT_PULL_SECONDS = 10.0  # for a dead actor's agent, maybe restarting, to hand the logs
FINAL_PULL_SECONDS = 10.0


@dataclass
class Tracked:
    launch_id: str
    node: str
    actor: Any
    mirror: Mirror
    started: bool = False
    waiting: Any = None  # the outstanding started()/exit_record() call
    asked: str = replies.STARTED  # which of the two `waiting` is
    pulling: Any = None
    next_pull: float = 0.0
    lost: bool = False  # its node was reported lost: report its exit as a kill
    check_failed: bool = False  # its node's failed check was reported (said once)


def pull_all(launches: Iterable[Tracked], now: float) -> None:
    for tracked in launches:
        if tracked.pulling is not None:
            ready, _ = ray.wait([tracked.pulling], timeout=0)
            if not ready:
                continue
            with contextlib.suppress(RayError):
                tracked.mirror.append(ray.get(ready[0]))
            tracked.pulling = None
        if tracked.started and now >= tracked.next_pull:
            tracked.next_pull = now + PULL_SECONDS
            tracked.pulling = tracked.actor.pull.remote(dict(tracked.mirror.offsets))


def final_pull(tracked: Tracked) -> None:
    if tracked.pulling is not None:
        with contextlib.suppress(RayError):
            tracked.mirror.append(ray.get(tracked.pulling, timeout=FINAL_PULL_SECONDS))
        tracked.pulling = None
    _drain(tracked, tracked.actor.pull.remote, FINAL_PULL_SECONDS)


def pull_from_agent(tracked: Tracked, agent: Any) -> None:
    """What a launch whose actor died wrote last, from its node's agent."""
    tracked.pulling = None
    _drain(tracked, lambda offsets: agent.pull.remote(tracked.launch_id, offsets),
           AGENT_PULL_SECONDS)


def _drain(tracked: Tracked, pull: Callable[[dict[str, int]], Any], seconds: float) -> None:
    """Append what `pull` brings until nothing is new, each pull given `seconds`."""
    for _ in range(64):
        deadline = time.monotonic() + seconds
        while True:
            try:
                chunk = ray.get(pull(dict(tracked.mirror.offsets)),
                                timeout=max(0.1, deadline - time.monotonic()))
                break
            except ActorUnavailableError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.2)
            except RayError:
                return
        if not tracked.mirror.append(chunk):
            return
