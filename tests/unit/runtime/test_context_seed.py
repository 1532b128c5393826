"""perdure.init() seeds only when asked to: a script's (or a Trainer's) own seeding survives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DRAWS = """
import json, random, sys
import numpy as np, torch
import perdure
from perdure.runtime.rng import seed_everything
if sys.argv[1] == "user-seeded":
    seed_everything(42)                 # what transformers.set_seed does, before init()
perdure.init(distributed=False, **json.loads(sys.argv[2]))
print(json.dumps([random.random(), float(np.random.rand()), float(torch.rand(1))]))
"""


def draws(mode: str, kwargs: dict[str, int], env: dict[str, str] | None = None) -> list[float]:
    full = {k: v for k, v in os.environ.items() if k != "PERDURE_SEED"}
    full.update(env or {})
    out = subprocess.run([sys.executable, "-c", DRAWS, mode, json.dumps(kwargs)], env=full,
                         capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def seeded(*seeds: int) -> dict[int, list[float]]:
    """Each seed's first draws after seed_everything (one interpreter for all: torch's import
    is the cost)."""
    code = ("import json, random, sys, numpy as np, torch\n"
            "from perdure.runtime.rng import seed_everything\n"
            "out = {}\n"
            "for seed in map(int, sys.argv[1:]):\n"
            "    seed_everything(seed)\n"
            "    out[seed] = [random.random(), float(np.random.rand()), float(torch.rand(1))]\n"
            "print(json.dumps(out))")
    out = subprocess.run([sys.executable, "-c", code, *map(str, seeds)], capture_output=True,
                         text=True, timeout=60, check=True)
    return {int(k): list(v) for k, v in json.loads(out.stdout).items()}


@pytest.fixture(scope="module")
def reference() -> dict[int, list[float]]:
    return seeded(0, 42, 7)


def test_init_leaves_a_seeded_script_alone(reference: dict[int, list[float]]) -> None:
    assert draws("user-seeded", {}) == reference[42]


def test_init_seeds_when_given_a_seed_or_perdure_seed(reference: dict[int, list[float]]) -> None:
    assert draws("unseeded", {"seed": 0}) == reference[0]
    assert draws("user-seeded", {"seed": 7}) == reference[7]  # an explicit seed is a request
    assert draws("unseeded", {}, env={"PERDURE_SEED": "7"}) == reference[7]


def test_init_without_a_seed_does_not_pin_generators(reference: dict[int, list[float]]) -> None:
    assert draws("unseeded", {}) != reference[0]
