"""What the elastic tests check in the workers' step logs: the lineage of global steps that
made the final weights, the samples it consumed per epoch, and the same steps replayed in one
process (DDP's gradient is the mean over the global batch, so one process fed each global
step's samples follows the same trajectory up to float rounding).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from elastic_worker import make_data
from torch import nn

from perdure.runtime.data import ElasticSampler

SEED = 7


@dataclass(frozen=True)
class GlobalStep:
    step: int
    epoch: int
    cursor: int
    world: int
    round: int
    ranks: frozenset[int]  # the ranks whose record of this step exists
    indices: frozenset[int]  # the samples those ranks logged


def lineage(step_records: list[dict[str, Any]]) -> list[GlobalStep]:
    """Step 1..n as the final state saw them: for each step, the records of its newest round
    (older rounds' records of a step were rolled back to a snapshot)."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for rec in step_records:
        by_step.setdefault(rec["step"], []).append(rec)
    out = []
    for step in sorted(by_step):
        newest = max(r["round"] for r in by_step[step])
        recs = [r for r in by_step[step] if r["round"] == newest]
        where = {(r["epoch"], r["cursor"], r["world"]) for r in recs}
        assert len(where) == 1, f"step {step}: ranks disagree on the position {where}"
        epoch, cursor, world = where.pop()
        out.append(GlobalStep(step, epoch, cursor, world, newest,
                              frozenset(r["rank"] for r in recs),
                              frozenset(i for r in recs for i in r["indices"])))
    assert [s.step for s in out] == list(range(1, len(out) + 1)), "a step number is missing"
    return out


def chunk(sampler: ElasticSampler, s: GlobalStep, batch: int) -> list[int]:
    """The samples global step `s` consumed over all its ranks."""
    sampler.set_position(s.epoch, s.cursor)
    end = min(s.cursor + s.world * batch, sampler.num_samples)
    return [int(i) for i in sampler.order()[s.cursor:end]]


def consumed_per_epoch(steps: list[GlobalStep], samples: int, batch: int,
                       incomplete_allowed: int = 0) -> dict[int, Counter[int]]:
    """Samples per epoch; checks each rank trained on its share of the step's chunk."""
    sampler = ElasticSampler(samples, batch, seed=SEED)
    out: dict[int, Counter[int]] = {}
    incomplete = 0
    for s in steps:
        whole = chunk(sampler, s, batch)
        assert s.indices <= set(whole), f"step {s.step}: a rank trained on samples not its own"
        if s.ranks != set(range(s.world)):  # a rank died or failed in this very step
            incomplete += 1
        else:
            assert s.indices == set(whole), f"step {s.step}: the ranks' batches miss samples"
        out.setdefault(s.epoch, Counter()).update(whole)
    assert incomplete <= incomplete_allowed, f"{incomplete} steps lack some rank's record"
    return out


def replay(steps: list[GlobalStep], samples: int, batch: int, lr: float = 0.01
           ) -> tuple[list[float], float]:
    """The weights and whole-data loss after `steps`, computed in this process."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = make_data(samples)
    sampler = ElasticSampler(samples, batch, seed=SEED)
    for s in steps:
        idx = chunk(sampler, s, batch)
        loss = ((model(x[idx]) - y[idx]) ** 2).sum() / (s.world * batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = float(nn.functional.mse_loss(model(x), y))
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist(), final


def uninterrupted(n_steps: int, world: int, samples: int, batch: int) -> list[GlobalStep]:
    """The lineage of a run that never changed size."""
    out, epoch, cursor = [], 0, 0
    for step in range(1, n_steps + 1):
        if cursor >= samples:
            epoch, cursor = epoch + 1, 0
        out.append(GlobalStep(step, epoch, cursor, world, 0, frozenset(), frozenset()))
        cursor = min(cursor + world * batch, samples)
    return out
