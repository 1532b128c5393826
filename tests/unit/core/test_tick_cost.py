"""A tick's cost grows linearly with what one job holds: admitting, starting and losing a
node of a 1,024-replica job (the most a spec may ask for) costs about 8x a 128-replica one,
not 64x. Ratios of the best of a few runs of this thread's CPU time (time.thread_time):
wall-clock ratios failed under load when other processes took the CPU mid-run."""

from __future__ import annotations

import dataclasses
import time

from tests.helpers.sim import SETTINGS, Sim, spec

from perdure.core.states import JobState


def scenario_seconds(replicas: int, elastic: bool) -> float:
    """Seconds in the ticks that admit the job, see every replica start, and lose a node."""
    pool = {"name": "w", "replicas": replicas, "command": ["python"]}
    if elastic:
        pool["min_replicas"] = 1
    # every launch in the admission tick: the cost of one tick over the whole job
    sim = Sim(nodes={f"n{i}": replicas // 4 for i in range(4)},
              settings=dataclasses.replace(SETTINGS, launches_per_tick=None))
    job = sim.submit(spec(pools=[pool]))
    began = time.thread_time()
    sim.step()  # admit and launch every replica
    sim.step()  # every replica reports it started
    spent = time.thread_time() - began
    assert sim.job(job).state is JobState.RUNNING
    sim.command("fail-node", "n0")
    began = time.thread_time()
    sim.step()  # the node goes down; a quarter of the replicas die
    sim.step()  # their exits: a shrink (elastic) or a group restart
    return spent + time.thread_time() - began


def best(replicas: int, elastic: bool) -> float:
    return min(scenario_seconds(replicas, elastic) for _ in range(3))


def test_tick_cost_is_linear_in_a_jobs_replicas() -> None:
    for elastic in (False, True):
        small, large = best(128, elastic), best(1024, elastic)
        assert large / small < 24, (elastic, small, large)
