"""How many replicas of a job are in each state, the slots they hold on each node and their
restarts, kept up to date from the replicas a tick changes. No side effects.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol

from perdure.core.states import ReplicaState

ALIVE = frozenset({ReplicaState.STARTING, ReplicaState.RUNNING, ReplicaState.STOPPING})
# Counted by the states' plain string values, which hash faster than an Enum
_ALIVE_VALUES = frozenset(s.value for s in ALIVE)
_STATE = operator.attrgetter("state")
_VALUE = operator.attrgetter("_value_")
_NODE = operator.attrgetter("node")
_SLOTS = operator.attrgetter("slots")
_RESTARTS = operator.attrgetter("restarts")


class Counted(Protocol):
    """What a count looks at of a replica (core.replica.Replica)."""

    @property
    def state(self) -> ReplicaState: ...
    @property
    def node(self) -> str | None: ...
    @property
    def slots(self) -> int: ...
    @property
    def restarts(self) -> int: ...


class Counts:
    """Replicas per state, slots held per node by live replicas, and their restarts."""

    __slots__ = ("restarts", "slots", "states")

    def __init__(self, states: dict[str, int], slots: dict[str, int], restarts: int) -> None:
        self.states, self.slots = states, slots  # states: by the state's value
        self.restarts = restarts

    @staticmethod
    def of(replicas: Sequence[Counted]) -> Counts:
        values = list(map(_VALUE, map(_STATE, replicas)))
        alive = map(_ALIVE_VALUES.__contains__, values)
        nodes = map(_NODE, replicas)
        sizes = set(map(_SLOTS, replicas))
        slots: dict[str, int] = {}
        if len(sizes) == 1:  # one size (a pool, or alike pools): no pairs to build
            each = sizes.pop()
            for node, n in Counter(itertools.compress(nodes, alive)).items():
                if node is not None:
                    slots[node] = each * n
        else:
            pairs = zip(nodes, map(_SLOTS, replicas), strict=True)
            held = Counter(itertools.compress(pairs, alive))
            for (node, each), n in held.items():
                if node is not None:
                    slots[node] = slots.get(node, 0) + each * n
        return Counts(dict(Counter(values)), slots, sum(map(_RESTARTS, replicas)))

    def copy(self) -> Counts:
        return Counts(dict(self.states), dict(self.slots), self.restarts)

    def replace(self, old: Counted, new: Counted) -> None:
        """`new` took `old`'s place."""
        self.restarts += new.restarts - old.restarts
        was, now = old.state._value_, new.state._value_
        self.states[was] -= 1
        self.states[now] = self.states.get(now, 0) + 1
        if old.node is not None and was in _ALIVE_VALUES:
            left = self.slots[old.node] - old.slots
            if left:
                self.slots[old.node] = left
            else:
                del self.slots[old.node]
        if new.node is not None and now in _ALIVE_VALUES:
            self.slots[new.node] = self.slots.get(new.node, 0) + new.slots

    def count(self, state: ReplicaState) -> int:
        return self.states.get(state._value_, 0)


def kept(replicas: Sequence[Counted], was: Mapping[int, Counted],
         base: Counts | None) -> tuple[Counts, Counts]:
    """The counts of `replicas`, and of them as they were before `was` (place -> the replica
    there before): `base`, or counted now."""
    if base is None:
        before = list(replicas)
        for i, old in was.items():
            before[i] = old
        base = Counts.of(before)
    now = base.copy()
    for i, old in was.items():
        now.replace(old, replicas[i])
    return now, base
