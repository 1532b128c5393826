"""Alike CPU replicas are placed by filling nodes in best-fit order (one sort, not a search
per replica: 16,384 replicas on 2,048 nodes); the nodes chosen are exactly best fit's."""

from __future__ import annotations

import random

import pytest

from perdure.core import scheduler
from perdure.core.records import Node
from perdure.core.replica import Replica
from perdure.core.scheduler import Capacity


def capacity(rng: random.Random) -> Capacity:
    nodes = {f"n{i:02d}": Node(f"n{i:02d}", rng.randint(1, 8), gpus=rng.choice([0, 0, 2]))
             for i in range(rng.randint(1, 30))}
    cap = Capacity(nodes, {"default": None}, [])
    for name, node in nodes.items():  # other jobs' replicas already there
        used = rng.randint(0, node.slots)
        cap.node_used[name] = used
        cap.free -= used
        if node.gpus and rng.random() < 0.5:
            cap.gpus_used[name] = {0, 1}
    return cap


@pytest.mark.parametrize("seed", range(200))
def test_fill_chooses_best_fits_nodes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    slots = rng.choice([1, 1, 2, 3])
    replicas = [Replica(f"w-{i}", "w", i, i, slots) for i in range(rng.randint(1, 40))]
    fast = capacity(random.Random(seed))
    filled = fast.place(replicas)
    monkeypatch.setattr(scheduler, "_alike_cpu", lambda replicas: False)
    slow = capacity(random.Random(seed))
    assert filled == slow.place(replicas)
    assert (fast.node_used, fast.free) == (slow.node_used, slow.free)
    # no GPUs given: the fill notes nothing (a launch reads a replica absent as given none)
    assert fast.devices == {} and not any(slow.devices.values())
