"""Elastic jobs: membership rounds instead of restarts (docs/guides/elastic.md).

No side effects. A lost replica does not stop the others: `resize` goes on with the survivors
(at least the minimum) and grows back, `pause` waits for the replacement. Every change is a
new round, published with a Rendezvous decision, and spends no restart.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Mapping, Set

from perdure.core.counts import ALIVE
from perdure.core.events import Rendezvous
from perdure.core.layout import Layout
from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.states import JobState, NodeState, ReplicaState
from perdure.core.tick import Tick

_NAME = operator.attrgetter("name")
_NODE = operator.attrgetter("node")
_RANK = operator.attrgetter("rank")
_STATE, _VALUE = operator.attrgetter("state"), operator.attrgetter("_value_")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_UP = frozenset({ReplicaState.STARTING.value, ReplicaState.RUNNING.value})  # not stopping
_ALIVE = frozenset(s.value for s in ALIVE)


def publish(t: Tick, job: Job, members: Collection[str], reason: str,
            where: Mapping[str, str] | None = None) -> None:
    """Start round `job.round + 1` (or an attempt's round 0) with `members` in rank order;
    `where`: nodes of members placed but not launched yet."""
    names, nodes = _in_rank_order(job, members, where)
    job.members = tuple(names)
    if reason != "admitted":
        job.round += 1
    t.decisions.append(Rendezvous(
        job.id, job.attempt, job.round, tuple(zip(job.members, nodes, strict=True)),
        reason, t.now,
    ))
    layout = t.layouts.get(job.id)
    if layout is not None:  # launches still to send get the new ranks
        t.layouts[job.id] = layout.renumbered(job)
    t.event(job, "elastic", f"round {job.round}: {reason} (world size {len(job.members)})")


def _in_rank_order(job: Job, members: Collection[str], where: Mapping[str, str] | None
                   ) -> tuple[list[str], list[str]]:
    """The names in `members`, in rank order, and each one's node ("" if none)."""
    wanted = members if isinstance(members, set | frozenset) else set(members)
    names = list(map(_NAME, job.replicas))
    if len(wanted) == len(job.replicas):  # every replica (an admission): no mask to make
        chosen, picked, places = job.replicas, names, range(len(job.replicas))
    else:
        mask = list(map(wanted.__contains__, names))
        chosen = list(itertools.compress(job.replicas, mask))
        picked = list(itertools.compress(names, mask))
        places = itertools.compress(range(len(mask)), mask)  # type: ignore[assignment]
    nodes = map(_NODE, chosen)
    plan = job.scratch.plan
    if plan:  # the plan's ranks are places in job.replicas
        planned = dict(zip(map(_FIRST, plan), map(_SECOND, plan), strict=True))
        nodes = map(planned.get, places, nodes)
    if where:
        nodes = map(where.get, picked, nodes)
    at = list(nodes)
    if None in at:  # placed nowhere yet
        at = [node or "" for node in at]
    if not job.ranked:  # not listed by rank
        ranks = list(map(_RANK, chosen))
        order = sorted(range(len(chosen)), key=ranks.__getitem__)
        picked, at = [picked[i] for i in order], [at[i] for i in order]
    return picked, at


def lose(t: Tick, job: Job, r: Replica, why: str) -> None:
    """`r` left the group: shrink (resize, enough left) or pause for its replacement; the
    other members on its node, when that is down, leave in the same round."""
    r = job.own(r)
    r.state, r.relaunch = ReplicaState.WAITING, False
    members = job.member_set()
    if r.name not in members:
        return  # left with its node in an earlier round
    resize = job.spec.elastic.mode == "resize"  # else pause: the node's others count too
    on_node = _on_node(job, r.node, t.layouts.get(job.id), alive=resize)
    together = ([x for x in on_node if x is not r and x.name in members]
                if _down(t, r.node) else [])
    if not resize and any(not x.alive for x in together):
        return  # left with its node in an earlier round
    lost = [r, *(x for x in together if x.alive)]
    gone = {x.name for x in lost}
    survivors = _survivors(job, members, lost) - gone
    before = len(job.members)
    if len(lost) > 1:
        why = f"{why}; with it on node {r.node}: {', '.join(x.name for x in lost[1:])}"
    if job.spec.elastic.mode == "resize" and len(survivors) >= job.min_members:
        publish(t, job, survivors, f"shrink {before} -> {len(survivors)}: {why}")
        return
    job.state = JobState.PENDING
    publish(t, job, members, f"pause at world size {before}: {why}; "
                             f"waiting for {', '.join(x.name for x in lost)}")


def _survivors(job: Job, members: frozenset[str], lost: list[Replica]) -> Set[str]:
    """The members up (not being stopped) or placed, `lost` aside."""
    up = job.count(ReplicaState.STARTING) + job.count(ReplicaState.RUNNING)
    plan = job.scratch.plan
    if len(job.replicas) - up - len(plan) == sum(x.state.value not in _UP for x in lost):
        return members
    planned = set(map(_FIRST, plan))
    kept = map(operator.or_, map(_UP.__contains__, map(_VALUE, map(_STATE, job.replicas))),
               map(planned.__contains__, map(_RANK, job.replicas)))
    return set(itertools.compress(map(_NAME, job.replicas), kept)) & members


def _on_node(job: Job, node: str | None, layout: Layout | None,
             alive: bool = False) -> list[Replica]:
    """The job's replicas on `node`, in list order (with `alive`: at least the live ones)."""
    if alive and node is not None and layout is not None:
        found = [x for x in job.named(layout.places.get(node, ())) if x.node == node]
        if sum(x.slots for x in found if x.alive) == job.counts().slots.get(node, 0):
            return found
    on = map(operator.eq, itertools.repeat(node), map(_NODE, job.replicas))
    return list(itertools.compress(job.replicas, on))


def _down(t: Tick, node: str | None) -> bool:
    n = t.nodes.get(node or "")
    return n is not None and n.state is NodeState.DOWN


def joined(t: Tick, job: Job) -> None:
    """Grow the group by the replicas up and not members, once none is starting."""

    if job.count(ReplicaState.STARTING) or len(job.members) == len(job.replicas):
        return  # some are still starting, or every replica is a member already
    members = job.member_set()
    others = list(itertools.compress(job.replicas, map(operator.not_, map(
        members.__contains__, map(_NAME, job.replicas)))))
    new = [x.name for x in others if x.state is ReplicaState.RUNNING and not _down(t, x.node)]
    if not new:
        return
    alive = sum(map(job.count, ALIVE)) - sum(x.alive for x in others)
    if alive == len(members):  # every member is alive: all stay
        grown: set[str] = set(members)
    else:
        values = map(_VALUE, map(_STATE, job.replicas))
        grown = set(itertools.compress(map(_NAME, job.replicas),
                                       map(_ALIVE.__contains__, values))) & members
    grown.update(new)
    publish(t, job, grown, f"grow {len(job.members)} -> {len(grown)}: {', '.join(new)} "
                           f"{'is' if len(new) == 1 else 'are'} up")


def may_wait_forever(job: Job) -> bool:
    """A resized job that runs with enough members waits for capacity without a deadline."""
    return (job.elastic and job.spec.elastic.mode == "resize"
            and job.state is JobState.RUNNING and len(job.members) >= job.min_members)
