"""Where a job's replicas are, as torchrun's environment contract says it: LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, each replica's first RANK and ROLE_RANK,
WORLD_SIZE, and an elastic round's member ranks.

No side effects. A layout is computed once for all replicas launched together and updated
(`renumbered`, `moved`), so a tick that launches a few replicas of a big job stays linear.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from perdure.core.model import Job, Planned
from perdure.core.records import Node
from perdure.core.replica import Replica

_NODE = operator.attrgetter("node")
_NAME = operator.attrgetter("name")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_RANK = operator.attrgetter("rank")
_POOL = operator.attrgetter("pool")
_PROCS = operator.attrgetter("procs_per_replica")
_K = TypeVar("_K")


def _runs(keys: list[_K]) -> list[tuple[_K, int]] | None:
    """Each key with the length of its run, when every key comes in one run; else None."""
    runs = [(key, len(list(same))) for key, same in itertools.groupby(keys)]
    return runs if len({key for key, _ in runs}) == len(runs) else None


def _places(at: Mapping[str, str | None]) -> dict[str, tuple[str, ...]]:
    """Each node's replicas in `at`'s order, nodes first seen first (torchrun's group order)."""
    names = list(at)
    runs = _runs(list(at.values()))
    if runs is not None:
        ends = itertools.accumulate(n for _, n in runs)
        return {node: tuple(names[end - n:end])
                for (node, n), end in zip(runs, ends, strict=True) if node is not None}
    grouped: dict[str, list[str]] = {}
    for name, node in at.items():
        if node is not None:
            grouped.setdefault(node, []).append(name)
    return {node: tuple(names) for node, names in grouped.items()}


def _pool_positions(replicas: list[Replica]) -> list[int]:
    """Each replica's position among its pool's (rank order)."""
    runs = _runs(list(map(_POOL, replicas)))
    if runs is not None:
        return list(itertools.chain.from_iterable(range(n) for _, n in runs))
    sizes: dict[str, int] = {}
    done = []
    for x in replicas:
        done.append(sizes.get(x.pool, 0))
        sizes[x.pool] = done[-1] + 1
    return done


@dataclass(frozen=True)
class PoolBase:
    """What every replica of a pool is launched with, in one launch of its job."""

    command: tuple[str, ...]
    env: dict[str, str]  # the replica's own names are placeholders, set by build_launch
    reports: str  # the launches' report dirs are under it
    logs: str  # the attempt's log dir


@dataclass(frozen=True)
class Layout:
    """Where a job's replicas are. torchrun's "group" is the node for one-process CPU
    replicas; with GPUs or several processes each replica is its own group (GROUP_RANK = its
    rank), as `torch.cuda.set_device(LOCAL_RANK)` needs when a replica sees only its GPUs."""

    at: Mapping[str, str | None]  # replica -> its node (None: placed nowhere)
    places: Mapping[str, tuple[str, ...]]  # node -> its replicas, in rank order
    order: Mapping[str | None, int]  # node -> GROUP_RANK, first seen first
    own_group: Mapping[str, tuple[int, int]] | None  # replica -> (procs, rank): own group
    members: tuple[str, ...]  # elastic: this round's members, in rank order
    first_rank: Mapping[str, tuple[int, int]]  # replica -> (first RANK, first ROLE_RANK)
    world: int  # WORLD_SIZE: every process of every replica
    devices: Mapping[str, str] = field(default_factory=dict)  # replica -> CUDA_VISIBLE_DEVICES
    # pool -> what its replicas are launched with (build_launch fills it)
    bases: dict[str, PoolBase] = field(default_factory=dict, compare=False, repr=False)
    key: tuple[int, int] = field(default=(0, 0), compare=False, repr=False)  # key_of(job)
    # node -> {replica: LOCAL_RANK}, made on first use
    _indexes: dict[str, dict[str, int]] = field(default_factory=dict, compare=False,
                                                repr=False)
    _ranks: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def groups(self) -> int:
        """GROUP_WORLD_SIZE."""
        return len(self.own_group) if self.own_group is not None else max(1, len(self.places))

    @property
    def member_rank(self) -> Mapping[str, int]:
        """elastic: this round's rank of each member."""
        if len(self._ranks) < len(self.members):
            self._ranks.update(zip(self.members, itertools.count()))
        return self._ranks

    def index_on(self, node: str) -> dict[str, int]:
        """The LOCAL_RANK of each replica on `node`."""
        index = self._indexes.get(node)
        if index is None:
            index = self._indexes[node] = dict(zip(self.places[node], itertools.count()))
        return index

    def env(self, r: Replica) -> dict[str, str]:
        if self.own_group is not None:
            local_rank, (local_size, group) = 0, self.own_group.get(r.name, (0, 0))
        else:
            node = self.at.get(r.name)
            index = self.index_on(node) if node is not None else {}
            local_rank, local_size = index.get(r.name, 0), len(index)
            group = self.order.get(node, 0)
        return {
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_size),
            "GROUP_RANK": str(group),
            "GROUP_WORLD_SIZE": str(self.groups),
        }

    def renumbered(self, job: Job) -> Layout:
        """This layout for `job`'s new round (its members changed, nobody moved)."""
        return dataclasses.replace(self, members=job.members, key=key_of(job), bases={},
                                   devices={}, _ranks={})

    def moved(self, job: Job, where: Mapping[str, str]) -> Layout:
        """This layout with the replicas of `where` on those nodes, as `of` would compute it."""
        at = self.at
        moves = dict(itertools.compress(where.items(), map(
            operator.ne, map(at.get, where.keys()), where.values())))
        if not moves:
            return self
        if not all(map(self.first_rank.__contains__, moves)):
            return Layout.of(job, where)  # not a replica of its own: anew
        now = dict(at)
        now.update(moves)
        if self.own_group is not None:  # each replica its own group: nodes change nothing
            return dataclasses.replace(self, at=now, bases={}, devices={})
        places = dict(self.places)
        touched = {at[name] for name in moves} | set(moves.values())
        touched.discard(None)
        by_position = self.first_rank.__getitem__  # first RANKs rise with the position
        for node in touched:
            assert node is not None
            staying = [n for n in places.get(node, ()) if n not in moves]
            staying += [n for n, to in moves.items() if to == node]
            if staying:
                places[node] = tuple(sorted(staying, key=by_position))
            else:
                places.pop(node, None)
        first = {node: by_position(names[0]) for node, names in places.items()}
        ordered = sorted(places, key=first.__getitem__)
        order: dict[str | None, int] = dict(zip(ordered, itertools.count()))
        indexes = {n: i for n, i in self._indexes.items() if n not in touched}
        return dataclasses.replace(self, at=now, places={n: places[n] for n in ordered},
                                   order=order, bases={}, devices={}, _indexes=indexes)

    @staticmethod
    def of(job: Job, where: Mapping[str, str] | None = None,
           planned: Sequence[Planned] = ()) -> Layout:
        """`where` and `planned`: nodes of replicas placed but not launched yet."""
        pools = {p.name: p for p in job.spec.pools}
        names = list(map(_NAME, job.replicas))
        if len(planned) == len(names):  # every replica planned, in rank order: its nodes
            at: dict[str, str | None] = dict(zip(names, map(_SECOND, planned), strict=True))
        else:
            at = dict(zip(names, map(_NODE, job.replicas), strict=True))
            if where:
                at.update(where)
            if planned:  # the plan's ranks are places in job.replicas
                at.update(zip(map(names.__getitem__, map(_FIRST, planned)),
                              map(_SECOND, planned), strict=True))
        each = {p.procs_per_replica for p in job.spec.pools}
        procs = ([each.pop()] * len(names) if len(each) == 1  # one size: no lookups
                 else list(map(_PROCS, map(pools.__getitem__, map(_POOL, job.replicas)))))
        own_group = None
        places: dict[str, tuple[str, ...]] = {}
        if any(p.procs_per_replica > 1 or p.gpus for p in job.spec.pools):
            own_group = dict(zip(names, zip(procs, map(_RANK, job.replicas), strict=True),
                                 strict=True))
        else:
            places = _places(at)
        starts = list(itertools.accumulate(procs, initial=0))
        done = _pool_positions(job.replicas)
        first = dict(zip(names, zip(starts, map(operator.mul, done, procs), strict=False),
                         strict=True))  # starts: one more, the world size
        return Layout(at, places, dict(zip(places, itertools.count())), own_group,
                      job.members, first, starts[-1], key=key_of(job))


def key_of(job: Job) -> tuple[int, int]:
    """What a layout is computed for: the job's attempt and round."""
    return job.attempt, job.round


def gpu_env(job: Job, nodes: Mapping[str, Node], replicas: list[Replica]) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES of each of `replicas`: its own GPUs, in its node's names; "" for
    a replica without GPUs on a node that has some, unless the spec sets it."""

    out: dict[str, str] = {}
    for x in replicas:
        node = nodes.get(x.node or "")
        if node is None or not (x.gpus or node.gpus):
            continue  # a CPU replica on a node without GPUs: nothing to set
        names = node.gpu_ids or tuple(str(i) for i in range(node.gpus))
        if x.gpus:
            out[x.name] = ",".join(names[i] if i < len(names) else str(i) for i in x.devices)
        elif node.gpus and not any("CUDA_VISIBLE_DEVICES" in e for e in _user_envs(job, x)):
            out[x.name] = ""
    return out


def _user_envs(job: Job, r: Replica) -> tuple[Mapping[str, str], ...]:
    pool = next(p for p in job.spec.pools if p.name == r.pool)
    return job.spec.env, pool.env
