"""The control plane's state: jobs, JSON round-trippable (their replicas: core/replica.py).

No side effects. `decide` works on `clone()`s, which share their replicas with the job cloned
until the tick changes one (`Job.own`: copy on write).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import operator
from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

from perdure.core.counts import ALIVE, Counts, kept
from perdure.core.replica import Replica
from perdure.core.spec import JobSpec
from perdure.core.states import ErrorCode, JobState, ReplicaState

_T = TypeVar("_T")
_STATE = operator.attrgetter("state")
_NAME = operator.attrgetter("name")
_RANK = operator.attrgetter("rank")
_RESTARTS = operator.attrgetter("restarts")
_SLOTS = operator.attrgetter("slots")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_WAITING = ReplicaState.WAITING
Planned = tuple[int, str, tuple[int, ...]]  # a replica placed, not launched: rank, node, GPUs


def _shallow(obj: _T) -> _T:
    new = object.__new__(type(obj))
    new.__dict__ = obj.__dict__.copy()
    return new


@dataclass(frozen=True)
class JobError:
    code: ErrorCode
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code.value, "message": self.message}


@dataclass(frozen=True)
class Blame:
    """The replica charged for this round's group restart as a lost peer's collateral exit,
    and when that was decided (an earlier failure reported later takes the charge)."""

    replica: str
    since: float


@dataclass
class Scratch:
    """What the controller keeps of a job in memory only (`Job.unlaunched` tells a restarted
    controller that a plan was lost)."""

    plan: tuple[Planned, ...] = ()  # placed, launches not sent yet (core.plan): rank order
    members: tuple[tuple[str, ...], frozenset[str]] | None = None  # `Job.member_set`
    # a tick's copy on write (`Job.own`): ids of the replicas this copy made, place -> the
    # replica there when cloned (None outside a tick), the counts as cloned or sealed
    owned: set[int] = field(default_factory=set)
    was: dict[int, Replica] | None = None
    counted: Counts | None = None

    def cloned(self) -> Scratch:
        return Scratch(self.plan, self.members, set(), {},
                       self.counted if self.was is None else None)


@dataclass
class Job:
    """A submitted job and where it stands. `spec_dir` anchors relative paths of the spec."""

    id: str
    spec: JobSpec
    spec_dir: str
    created: float
    state: JobState = JobState.QUEUED
    attempt: int = 0
    round: int = 0  # rendezvous round within the attempt
    replicas: list[Replica] = field(default_factory=list)
    retries: dict[str, int] = field(default_factory=dict)  # spent job retries by error code
    error: JobError | None = None
    # What the job becomes once every replica is down (None while nothing is ending)
    after_stop: JobState | None = None
    waiting_since: float | None = None  # waiting for capacity larger than the healthy total
    wait_reason: str = ""
    hold: bool = False  # suspended until `perdure resume`
    updated: float = 0.0
    step: int | None = None  # latest training step reported by the runtime
    last_checkpoint: float | None = None  # when a replica last reported a checkpoint save
    checkpoint_step: int | None = None  # the step it reported then
    running_since: float | None = None  # when the job last became RUNNING (a restart too)
    failed_saves: int = 0  # checkpoint saves that failed in a row (the runtime's report)
    save_error: str = ""  # the last failed save's reason
    save_alert: bool = False  # failed_saves reached the runtime's alert threshold
    # elastic: this round's replicas, rank order (a tuple: clones share it)
    members: tuple[str, ...] = ()
    blame: Blame | None = None  # a lost peer's collateral exit charged for this round
    spares: dict[str, int] = field(default_factory=dict)  # spare nodes held: node -> slots
    # QUEUED in the backend's own scheduler: its reason there (`in_backend_queue`)
    backend_queue: str = ""
    unlaunched: int = 0  # placed, not launched when stored (without a plan: core.plan.replan)
    # ranks whose group-restart stops are still to be sent; never changed in place
    unstopped: list[int] = field(default_factory=list)
    scratch: Scratch = field(default_factory=Scratch, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def priority(self) -> int:
        return self.spec.priority

    @functools.cached_property
    def slots(self) -> int:
        return self.spec.total_slots

    @functools.cached_property
    def spares_wanted(self) -> int:
        return self.spec.total_spares

    @property
    def elastic(self) -> bool:
        """Whether the spec lets the job run on fewer replicas (some pool has min_replicas)."""
        return any(p.min_replicas is not None for p in self.spec.pools)

    @property
    def in_backend_queue(self) -> bool:
        """QUEUED in the backend's own queue, after admission: it holds slots and quota."""
        return self.state is JobState.QUEUED and bool(self.backend_queue)

    @property
    def awaiting_admission(self) -> bool:
        """QUEUED for perdure's own scheduler (quota and capacity)."""
        return self.state is JobState.QUEUED and not self.backend_queue

    @property
    def holds_capacity(self) -> bool:
        return self.state.holds_capacity or self.in_backend_queue

    @property
    def min_members(self) -> int:
        return sum(p.min_replicas or p.replicas for p in self.spec.pools)

    @property
    def primary(self) -> Replica:
        return self.replicas[0]

    def clone(self) -> Job:
        """A copy the tick may change; it shares the spec, and the replicas until `own`."""
        job = _shallow(self)
        job.__dict__.pop("usage", None)
        job.__dict__.pop("gpu_usage", None)
        job.replicas = list(self.replicas)
        job.scratch = self.scratch.cloned()
        job.retries = dict(self.retries)
        job.spares = dict(self.spares)
        return job

    def own(self, r: Replica) -> Replica:
        """This copy's own replica at `r`'s place, to change; use it, never `r`, from then on."""
        i = r.rank
        if i >= len(self.replicas) or self.replicas[i].name != r.name:  # ranks not positions
            i = next(k for k, x in enumerate(self.replicas) if x.name == r.name)
        at, scratch = self.replicas[i], self.scratch
        if id(at) in scratch.owned:
            return at
        mine = _shallow(at)
        self.replicas[i] = mine
        scratch.owned.add(id(mine))
        if scratch.was is not None:
            scratch.was.setdefault(i, at)
        else:
            scratch.counted = None  # changed outside a tick: counted again when asked
        return mine

    def own_all(self) -> list[Replica]:
        """Every replica, owned."""
        return [self.own(r) for r in self.replicas]

    def rank_of(self, name: str) -> int | None:
        """The rank make_replicas gives replica `name` ("<pool>-<index>"), None if none."""
        pool, _, index = name.rpartition("-")
        first = self._first_ranks.get(pool)
        ok = first is not None and index.isascii() and index.isdigit()
        return first + int(index) if ok and first is not None else None

    @functools.cached_property
    def _first_ranks(self) -> dict[str, int]:
        out, rank = {}, 0
        for p in self.spec.pools:
            out[p.name] = rank
            rank += p.replicas
        return out

    @functools.cached_property
    def ranked(self) -> bool:
        ranks = list(map(_RANK, self.replicas))
        return ranks == sorted(ranks)

    @functools.cached_property
    def order(self) -> tuple[int, float, str]:
        """Admission order: higher priority first, then older first."""
        return (-self.priority, self.created, self.id)

    def states(self) -> list[ReplicaState]:
        return list(map(_STATE, self.replicas))

    def counts(self) -> Counts:
        """Replicas per state and slots held per node (a copy); a tick's clone recounts only
        the replicas it owns."""
        scratch = self.scratch
        if scratch.was is None:
            counted = scratch.counted
            return Counts.of(self.replicas) if counted is None else counted.copy()
        if len(scratch.was) * 4 > len(self.replicas):  # a full count is as cheap
            return Counts.of(self.replicas)
        now, scratch.counted = kept(self.replicas, scratch.was, scratch.counted)
        return now

    def seal(self) -> None:
        """The tick that changed this copy is committed: its counts are kept, nothing owned."""
        counted = self.counts()
        self.scratch.owned, self.scratch.was, self.scratch.counted = set(), None, counted

    def member_set(self) -> frozenset[str]:
        cache = self.scratch.members
        if cache is None or cache[0] is not self.members:
            cache = self.scratch.members = (self.members, frozenset(self.members))
        return cache[1]

    def count(self, state: ReplicaState) -> int:
        return self.counts().count(state)

    def count_restarts(self) -> int:
        """The replicas' restarts in this attempt."""
        if self.scratch.was is None and self.scratch.counted is None:
            return sum(map(_RESTARTS, self.replicas))
        return self.counts().restarts

    def named(self, names: Collection[str]) -> list[Replica]:
        """The replicas named in `names`, in list order (found by their ranks when few)."""
        if len(names) * 8 < len(self.replicas):
            places = [i for i in map(self.rank_of, names)
                      if i is not None and i < len(self.replicas)]
            if len(places) == len(names) and all(
                    self.replicas[i].name == name for i, name in zip(places, names, strict=True)):
                return list(map(self.replicas.__getitem__, sorted(places)))
        return list(itertools.compress(self.replicas, map(names.__contains__,
                                                          map(_NAME, self.replicas))))

    def unplaced(self) -> list[Replica]:
        """The WAITING replicas not placed already (`plan`), in list order."""
        plan, was = self.scratch.plan, self.scratch.was
        left = self.count(ReplicaState.WAITING) - len(plan)
        if was is not None and left <= len(was):
            planned = set(map(_FIRST, plan))  # its ranks are places in `replicas`
            mine = [i for i in sorted(was)
                    if self.replicas[i].state is _WAITING and i not in planned]
            if len(mine) == left:
                return list(map(self.replicas.__getitem__, mine))
        mask = list(map(_WAITING.__eq__, map(_STATE, self.replicas)))
        if plan:
            deque(map(mask.__setitem__, map(_FIRST, plan), itertools.repeat(False)), maxlen=0)
        return list(itertools.compress(self.replicas, mask))

    @functools.cached_property
    def usage(self) -> dict[str, int]:
        return self.used_slots()

    @functools.cached_property
    def gpu_usage(self) -> dict[str, list[int]]:
        return self.used_gpus()

    def used_gpus(self) -> dict[str, list[int]]:
        """GPU indices held on each node by replicas that may still have a process."""
        used: dict[str, list[int]] = {}
        if self.awaiting_admission or self.state is JobState.SUSPENDED or not any(
                p.gpus for p in self.spec.pools):
            return used  # nothing of it runs, or none of it holds GPUs
        for r in self.replicas:
            if r.node is not None and r.devices and r.state in ALIVE:
                used.setdefault(r.node, []).extend(r.devices)
        for _, node, devices in self.scratch.plan:
            if devices:
                used.setdefault(node, []).extend(devices)
        return used

    def used_slots(self) -> dict[str, int]:
        """Slots held on each node by replicas that may still have a process."""
        if self.awaiting_admission or self.state is JobState.SUSPENDED:
            return {}  # nothing of a queued job runs
        used = self.counts().slots
        for node, slots in self.spares.items():
            used[node] = used.get(node, 0) + slots
        plan = self.scratch.plan
        if not plan:
            return used
        sizes = {p.slots for p in self.spec.pools}
        if len(sizes) == 1:
            each = sizes.pop()
            for node, n in Counter(map(_SECOND, plan)).items():
                used[node] = used.get(node, 0) + each * n
            return used
        held = Counter(zip(map(_SECOND, plan), map(_SLOTS, map(
            self.replicas.__getitem__, map(_FIRST, plan))), strict=True))
        for (node, each), n in held.items():
            used[node] = used.get(node, 0) + each * n
        return used

    def to_json(self, *, replicas: bool = True) -> dict[str, Any]:
        """Everything but the spec (stored apart), and without `replicas` the replicas too."""
        d = {f: getattr(self, f) for f in _JOB_FIELDS}
        d["state"] = self.state.value
        d["after_stop"] = self.after_stop.value if self.after_stop else None
        d["error"] = self.error.to_json() if self.error else None
        d["retries"] = dict(self.retries)
        d["members"] = list(self.members)
        d["spares"] = dict(self.spares)
        blame = self.blame
        d["blamed"], d["round_began"] = (blame.replica, blame.since) if blame else (None, None)
        if replicas:
            d["replicas"] = [r.to_json() for r in self.replicas]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], spec: JobSpec) -> Job:
        d = {k: v for k, v in d.items() if k in _JOB_FIELDS or k in _JSON_FIELDS}
        d["spec"] = spec
        d["state"] = JobState(d["state"])
        d["after_stop"] = JobState(d["after_stop"]) if d.get("after_stop") else None
        err = d.get("error")
        d["error"] = JobError(ErrorCode(err["code"]), err["message"]) if err else None
        d["replicas"] = [Replica.from_json(r) for r in d["replicas"]]
        d["members"] = tuple(d.get("members", ()))
        blamed, since = d.pop("blamed", None), d.pop("round_began", None)
        d["blame"] = Blame(blamed, since) if blamed is not None and since is not None else None
        return cls(**d)


_JSON_FIELDS = ("state", "after_stop", "error", "retries", "replicas", "members", "spares",
                "blamed", "round_began")
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job)
                    if f.name not in ("spec", "scratch", "blame", *_JSON_FIELDS))
