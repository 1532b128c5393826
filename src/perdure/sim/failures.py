"""Failure files: how often each kind of interruption happens, what it hits, how it is seen.

The format is docs/guides/planning.md's (and node-health.md's for `repeat_offenders`). A
lemon's failure hits one of the lemons chosen uniformly (none if it runs nothing of the job:
quarantined, or idle); the categories' total rate stays what the file says. A run that would
meet over MAX_EXPECTED_FAILURES on average is refused naming the rate field; under it the
failures are drawn as the simulation reaches them. No side effects but `load`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from perdure.core.specbase import SpecModel
from perdure.core.specread import parse_model
from perdure.sim.sourcefile import read_source

BUILTIN = ("llama3", "llama3-lemons")
# The most failures a simulation meets on average: each goes through the real core, so a run
# over it would take days (and a rate typed a million times too high, forever).
MAX_EXPECTED_FAILURES = 1_000_000


Kind = Literal["transient", "hardware"]


class Reference(SpecModel):
    gpus: int = Field(ge=1)
    days: float = Field(gt=0)


class Category(SpecModel):
    name: str
    count: float | None = Field(None, ge=0)
    per_gpu_day: float | None = Field(None, ge=0)
    mtbf_hours: float | None = Field(None, gt=0)
    scope: Literal["gpu", "node", "switch", "job"]
    kind: Literal["transient", "hardware"]
    hang: bool = False
    detect_seconds: float = Field(10.0, ge=0)
    repair_hours: float = Field(24.0, ge=0)

    @model_validator(mode="after")
    def _one_rate(self) -> Category:
        given = [n for n in ("count", "per_gpu_day", "mtbf_hours") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"category {self.name!r}: give exactly one of count, per_gpu_day, "
                             f"mtbf_hours (got {', '.join(given) or 'none'})")
        return self


class RepeatOffenders(SpecModel):
    share: float = Field(gt=0, lt=1)  # of the cluster's nodes
    factor: float = Field(ge=1)  # a lemon's failure rate over another node's
    kinds: list[Kind] = Field(default_factory=lambda: list[Kind](["hardware"]))

    def lemon_odds(self) -> float:
        """The chance that a failure of one of `kinds` is a lemon's."""
        return self.share * self.factor / (self.share * self.factor + 1 - self.share)


class FailureFile(SpecModel):
    reference: Reference | None = None
    switch_nodes: int = Field(16, ge=1)
    categories: list[Category] = Field(min_length=1, max_length=256)
    repeat_offenders: RepeatOffenders | None = None

    @model_validator(mode="after")
    def _reference(self) -> FailureFile:
        if self.reference is None and any(c.count is not None for c in self.categories):
            raise ValueError("categories given as `count` need `reference: {gpus, days}`")
        return self

    def rate(self, c: Category) -> float:
        """Failures of category `c` per GPU-day."""
        if c.per_gpu_day is not None:
            return c.per_gpu_day
        if c.mtbf_hours is not None:
            return 24.0 / c.mtbf_hours
        assert c.count is not None and self.reference is not None
        return c.count / (self.reference.gpus * self.reference.days)


def load(source: str) -> FailureFile:
    """A failure file by path, or a built-in by name (`llama3`)."""
    text, name = read_source(source, "failure file", BUILTIN)
    return parse_model(FailureFile, text, name)


@dataclass(frozen=True)
class Draw:
    """One failure: when (seconds from the start), which category, which node index, and
    (with repeat offenders) whether it is a lemon's."""

    time: float
    category: Category
    node_index: int
    lemon: bool = False


def expected(f: FailureFile, gpus: int, seconds: float) -> float:
    """How many failures a run of `seconds` on `gpus` GPUs meets on average."""
    return sum(f.rate(c) for c in f.categories) * gpus * seconds / 86400.0


def check_expected(f: FailureFile, gpus: int, seconds: float, name: str) -> None:
    """ValueError naming the category's rate field that makes the run meet over
    MAX_EXPECTED_FAILURES failures on average (each is simulated, one after another)."""
    total = expected(f, gpus, seconds)
    if total <= MAX_EXPECTED_FAILURES:
        return
    i, c = max(enumerate(f.categories), key=lambda ic: f.rate(ic[1]))
    field = next(n for n in ("count", "per_gpu_day", "mtbf_hours") if getattr(c, n) is not None)
    raise ValueError(
        f"{name}: categories.{i}.{field} ({c.name}: {getattr(c, field):g}) and the others "
        f"give about {total:.3g} failures in {seconds / 86400:g} days on {gpus:,} GPUs; "
        f"perdure sim simulates at most {MAX_EXPECTED_FAILURES:,} (each one through the real "
        "core): lower the rate, --days or the job's GPUs")


class Draws:
    """Every failure of a run of `seconds` on `gpus` GPUs over `nodes` nodes, in time order:
    a Poisson process per category (its rate x the GPUs), a uniformly chosen node.

    Drawn as they are iterated, so memory stays flat however many there are; construction
    notes where each category's stream begins in one generator's sequence (a seed gives
    the failures it always gave).
    """

    def __init__(self, f: FailureFile, gpus: int, nodes: int, seconds: float,
                 seed: int) -> None:
        self.nodes, self.seconds = nodes, seconds
        rng = random.Random(seed)
        lemons = f.repeat_offenders
        self.streams: list[tuple[Category, float, float, tuple[object, ...]]] = []
        for c in f.categories:
            per_second = f.rate(c) * gpus / 86400.0
            if per_second <= 0:
                continue
            odds = lemons.lemon_odds() if lemons is not None and c.kind in lemons.kinds else 0.0
            self.streams.append((c, per_second, odds, rng.getstate()))
            for _ in self._stream(rng, c, per_second, odds):
                pass

    def _stream(self, rng: random.Random, c: Category, per_second: float,
                odds: float) -> Iterator[Draw]:
        t = 0.0
        while True:
            t += -math.log(1.0 - rng.random()) / per_second
            if t >= self.seconds:
                return
            node = rng.randrange(self.nodes)
            # drawn only where lemons exist: a file without them keeps its draws
            yield Draw(t, c, node, lemon=bool(odds) and rng.random() < odds)

    def __iter__(self) -> Iterator[Draw]:
        streams = []
        for c, per_second, odds, state in self.streams:
            rng = random.Random()
            rng.setstate(state)
            streams.append(self._stream(rng, c, per_second, odds))
        return heapq.merge(*streams, key=lambda d: d.time)  # stable: ties in category order


def lemon_nodes(f: FailureFile, names: list[str], seed: int) -> set[str]:
    """Which of the cluster's nodes are repeat offenders (the same for every policy)."""
    if f.repeat_offenders is None:
        return set()
    count = max(1, round(f.repeat_offenders.share * len(names)))
    return set(random.Random(f"lemons-{seed}").sample(sorted(names), min(count, len(names))))
