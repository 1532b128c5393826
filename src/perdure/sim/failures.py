"""Failure files: how often each kind of interruption happens, what it hits, how it is seen.

No side effects but `load` (reads one file). A failure file is YAML:

    reference: {gpus: 16384, days: 54}   # what `count` was observed over (rates per GPU-day)
    switch_nodes: 16                     # nodes behind one switch (scope: switch)
    categories:
      - {name: faulty-gpu, count: 148, scope: gpu, kind: hardware, detect_seconds: 30,
         repair_hours: 24}
      - {name: software-bug, count: 54, scope: gpu, kind: transient, detect_seconds: 5}
      - {name: nccl-watchdog, count: 7, scope: gpu, kind: transient, hang: true}

Each category gives its rate as `count` (over the reference), `per_gpu_day`, or `mtbf_hours`
(of one GPU). scope: gpu | node (one node's replica), switch (`switch_nodes` neighbouring
nodes), job (every replica). kind: transient (a restart on the same node helps) or hardware
(the node leaves for `repair_hours`). `hang: true`: the process does not exit; the job stalls
until a hang detector acts (the policy's: NCCL's timeout or perdure's watchdog).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from perdure.core.spec import parse_model
from perdure.core.specbase import SpecModel
from perdure.sim.sourcefile import read_source

BUILTIN = ("llama3",)


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


class FailureFile(SpecModel):
    reference: Reference | None = None
    switch_nodes: int = Field(16, ge=1)
    categories: list[Category] = Field(min_length=1, max_length=256)

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
    """One failure: when (seconds from the start), which category, which node index."""

    time: float
    category: Category
    node_index: int


def draws(f: FailureFile, gpus: int, nodes: int, seconds: float, seed: int) -> list[Draw]:
    """Every failure of a run of `seconds` on `gpus` GPUs over `nodes` nodes, in time order:
    a Poisson process per category (its rate x the GPUs), a uniformly chosen node."""
    rng = random.Random(seed)
    out: list[Draw] = []
    for c in f.categories:
        per_second = f.rate(c) * gpus / 86400.0
        if per_second <= 0:
            continue
        t = 0.0
        while True:
            t += -math.log(1.0 - rng.random()) / per_second
            if t >= seconds:
                break
            out.append(Draw(t, c, rng.randrange(nodes)))
    out.sort(key=lambda d: d.time)
    return out
