"""Soak: the resume proof under 50 random faults (`make soak`; skipped by `make test`).

The ddp_mlp example runs once uninterrupted, then under a random stream of faults, each
landing while the job trains (or, for a controller crash, at any moment, restarts included):
replica SIGKILL, SIGKILL during a checkpoint save, SIGABRT (a job retry), SIGTERM to one
replica (it asks the others to save and suspend), preemption with and without --hold, node
preemption, node drain (maintenance), and controller SIGKILL. The faulty run must succeed
with the clean run's final weights, train on every sample exactly once per epoch, and resume
every relaunch from a checkpoint.

PERDURE_SOAK_FAULTS sets the number of faults (default 50), PERDURE_SOAK_KINDS a comma-separated
subset of the kinds below (default all), PERDURE_SOAK_EPOCHS the run's length (default 250),
PERDURE_TEST_SEED the schedule. Takes ~12 minutes on
2 cores.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable

import pytest
from test_resume_harness import (
    FaultyRun,
    Settings,
    exactly_once_problems,
    run_clean,
)
from tests.helpers.harness import Perdure

# 4000 steps of ~70 ms: the job trains on while each fault is injected (CLI calls take
# seconds), so 50 faults take ~2500 of them.
SETTINGS = Settings(epochs=int(os.environ.get("PERDURE_SOAK_EPOCHS", "250")), step_time=0.05)
# A fault: inject it into the run; True when it makes the replicas start again.
Fault = Callable[[FaultyRun, random.Random], bool]


def _kill(run: FaultyRun, rnd: random.Random) -> bool:
    run.kill_replica(f"worker-{rnd.randrange(SETTINGS.replicas)}")
    return True


def _kill_during_save(run: FaultyRun, rnd: random.Random) -> bool:
    run.kill_during_save(f"worker-{rnd.randrange(SETTINGS.replicas)}")
    return True


def _abort(run: FaultyRun, rnd: random.Random) -> bool:
    run.kill_replica(f"worker-{rnd.randrange(SETTINGS.replicas)}", "ABRT")
    return True


def _term_one(run: FaultyRun, rnd: random.Random) -> bool:
    run.kill_replica(f"worker-{rnd.randrange(SETTINGS.replicas)}", "TERM")
    return True


def _preempt(run: FaultyRun, rnd: random.Random) -> bool:
    if rnd.random() < 0.5:
        run.preempt()
        return True
    run.preempt(hold=True)
    run.wait_state(lambda d: d["state"] == "SUSPENDED", timeout=120)
    time.sleep(rnd.uniform(0, 3))
    run.resume()
    return True


def _node_fault(action: str) -> Fault:
    def fault(run: FaultyRun, rnd: random.Random) -> bool:
        nodes = run.nodes_in_use()
        if not nodes:  # replicas are being placed: preempt the job instead
            run.preempt()
            return True
        node = rnd.choice(nodes)
        run.node(action, node)
        # Back once the job has left it, so that two node faults never leave too few slots.
        run.wait_state(lambda d: all(r["node"] != node or r["state"] != "RUNNING"
                                     for r in d["replicas"]), timeout=120)
        run.node("restore", node)
        return True
    return fault


def _controller(run: FaultyRun, rnd: random.Random) -> bool:
    run.kill_controller()
    time.sleep(rnd.uniform(0, 3))
    run.start_controller()
    return False  # the replicas train on: the next fault may hit the same launch


FAULTS: dict[str, tuple[int, Fault]] = {
    "kill": (4, _kill),  # SIGKILL a replica: group restart
    "kill-save": (2, _kill_during_save),  # ... while a checkpoint is being written
    "abort": (1, _abort),  # SIGABRT (exit 134, transient): job retry, new attempt
    "term": (1, _term_one),  # SIGTERM one replica: all save, exit 75, job suspends
    "preempt": (2, _preempt),  # with or without --hold (then `perdure resume`)
    "node-preempt": (1, _node_fault("preempt")),  # suspended, requeued on other nodes
    "node-drain": (1, _node_fault("drain")),  # maintenance: replicas moved
    "controller": (2, _controller),  # controller SIGKILL, started again 0-3 s later
}


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_soak_random_faults_end_bit_identical(perdure: Perdure) -> None:
    seed = int(os.environ.get("PERDURE_TEST_SEED", random.randrange(2**31)))
    count = int(os.environ.get("PERDURE_SOAK_FAULTS", "50"))
    print(f"soak: {count} faults, seed {seed} (PERDURE_TEST_SEED={seed} replays it)")
    rnd = random.Random(seed)
    cluster = perdure.cluster({"a": 2, "b": 2, "c": 2})
    clean = run_clean(perdure, SETTINGS, cluster, timeout=600)
    names = os.environ.get("PERDURE_SOAK_KINDS", ",".join(FAULTS)).split(",")
    assert set(names) <= set(FAULTS), f"PERDURE_SOAK_KINDS: use some of {', '.join(FAULTS)}"
    weights = [FAULTS[n][0] for n in names]
    run = FaultyRun(perdure, "soak", SETTINGS, cluster)
    kinds: Counter[str] = Counter()
    seen, relaunched = 0, True
    try:
        run.submit()
        for i in range(count):
            kind = rnd.choices(names, weights)[0]
            # Land while a launch trains (a new one, if the last fault restarted the
            # replicas) at a random distance from its resume; the first fault waits for a
            # committed checkpoint.
            first = SETTINGS.every + 5 if i == 0 else 1
            run.wait_training(rnd.randint(first, 2 * SETTINGS.every),
                              newer_than=seen if relaunched else seen - 1, timeout=300)
            seen = len(run.launches())
            relaunched = FAULTS[kind][1](run, rnd)
            kinds[kind] += 1
            print(f"fault {i + 1}/{count}: {kind}: {run.faults[-1] if run.faults else ''}",
                  flush=True)
        d = run.wait_state(lambda d: d["state"] in ("SUCCEEDED", "FAILED"), timeout=900)
    finally:
        run.close()
    launches = run.launches()
    print(f"faults by kind: {dict(kinds)}; {len(launches)} launches of worker-0; "
          f"goodput {d['goodput']}")
    assert d["state"] == "SUCCEEDED", (d["error"], d["events"][-15:])
    faulty = run.result()
    assert faulty.sha256 == clean.sha256, run.faults
    assert exactly_once_problems(faulty.consumed, SETTINGS.samples, SETTINGS.epochs) == []
    assert faulty.consumed == clean.consumed
    started = [x for x in launches[1:] if x.started]
    assert all(x.resumed is not None for x in started), launches
