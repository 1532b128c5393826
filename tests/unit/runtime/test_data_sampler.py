"""ElasticSampler: pure epoch order, global cursor, exact resume on any world size."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perdure.runtime import ElasticSampler


def _ranks(n: int, b: int, world: int, *, drop_last: bool = False, seed: int = 0,
           epoch: int = 0, state: dict[str, object] | None = None) -> list[ElasticSampler]:
    samplers = [
        ElasticSampler(n, b, seed=seed, drop_last=drop_last, rank=r, world_size=world)
        for r in range(world)
    ]
    for s in samplers:
        s.set_epoch(epoch)
        if state is not None:
            s.load_state_dict(state)
    return samplers


def _run(samplers: list[ElasticSampler], steps: float) -> tuple[list[list[list[int]]], bool]:
    """Step all ranks together; returns the steps taken and whether the epoch ran out."""
    iters = [iter(s) for s in samplers]
    taken: list[list[list[int]]] = []
    while len(taken) < steps:
        batches = [next(it, None) for it in iters]
        if all(b is None for b in batches):
            return taken, True
        assert all(b is not None for b in batches), "ranks disagree on the number of steps"
        taken.append([list(b) for b in batches if b is not None])
    return taken, False


@settings(max_examples=250, deadline=None)
@given(
    n=st.integers(0, 300),
    b=st.integers(1, 8),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
    segments=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 25)), min_size=0, max_size=5),
    last_world=st.integers(1, 8),
)
def test_any_stops_and_world_sizes_consume_each_sample_at_most_once(
    n: int, b: int, drop_last: bool, seed: int, epoch: int,
    segments: list[tuple[int, int]], last_world: int,
) -> None:
    consumed: list[int] = []
    state: dict[str, object] | None = None
    finished_on: int | None = None
    for world, steps in [*segments, (last_world, float("inf"))]:
        samplers = _ranks(n, b, world, drop_last=drop_last, seed=seed, epoch=epoch, state=state)
        taken, _ = _run(samplers, steps)
        for step in taken:
            for batch in step:
                consumed += batch
                if drop_last:
                    assert len(batch) == b
        states = [s.state_dict() for s in samplers]
        assert all(s == states[0] for s in states), "the cursor is global, not per rank"
        state = states[0]
        if state["cursor"] == n and finished_on is None:
            finished_on = world  # the world size of the epoch's last step, where drops happen
    counts = Counter(consumed)
    assert all(c == 1 for c in counts.values()), "a sample was consumed twice"
    assert set(counts) <= set(range(n))
    assert state is not None and state["cursor"] == n
    if drop_last:
        assert finished_on is not None
        assert n - len(consumed) < finished_on * b  # only the epoch's last partial step drops
    else:
        assert len(consumed) == n


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), b=st.integers(1, 6), world=st.integers(1, 8),
       stop=st.integers(0, 40))
def test_resume_on_the_same_world_size_repeats_the_uninterrupted_batches(
    n: int, b: int, world: int, stop: int
) -> None:
    whole, _ = _run(_ranks(n, b, world), float("inf"))
    first = _ranks(n, b, world)
    head, _ = _run(first, stop)
    tail, _ = _run(_ranks(n, b, world, state=first[0].state_dict()), float("inf"))
    assert head + tail == whole


def test_order_is_a_pure_function_of_seed_and_epoch() -> None:
    a = ElasticSampler(1000, 10, seed=3, rank=0, world_size=1)
    b = ElasticSampler(1000, 10, seed=3, rank=0, world_size=1)
    a.set_epoch(2)
    b.set_epoch(2)
    assert list(a.order()) == list(b.order())
    assert sorted(a.order().tolist()) == list(range(1000))
    b.set_epoch(3)
    assert list(a.order()) != list(b.order())
    c = ElasticSampler(1000, 10, seed=4, rank=0, world_size=1)
    c.set_epoch(2)
    assert list(a.order()) != list(c.order())


def test_global_stride_and_the_last_partial_step() -> None:
    s = ElasticSampler(10, 2, shuffle=False, rank=1, world_size=4)
    # step 0 covers 0..7: rank 1 takes 1 and 5; step 1 covers 8..9: rank 1 takes 9
    assert [list(x) for x in s] == [[1, 5], [9]]
    s3 = ElasticSampler(10, 2, shuffle=False, rank=3, world_size=4)
    assert [list(x) for x in s3] == [[3, 7], []]  # fewer samples than ranks left: empty
    dropped = ElasticSampler(10, 2, shuffle=False, drop_last=True, rank=3, world_size=4)
    assert [list(x) for x in dropped] == [[3, 7]]
    assert dropped.cursor == 10


def test_state_reflects_yielded_batches_and_is_plain_json() -> None:
    s = ElasticSampler(20, 3, seed=1, rank=0, world_size=2)
    it = iter(s)
    next(it)
    assert s.cursor == 6
    state = s.state_dict()
    assert json.loads(json.dumps(state)) == state
    next(it)
    assert s.state_dict()["cursor"] == 12
    assert len(s) == 2  # 8 samples left, 6 per step


def test_set_epoch_resets_a_new_epoch_but_keeps_a_resumed_one() -> None:
    s = ElasticSampler(20, 2, rank=0, world_size=1)
    s.load_state_dict({**s.state_dict(), "epoch": 3, "cursor": 8})
    s.set_epoch(3)
    assert s.cursor == 8
    s.set_epoch(4)
    assert (s.epoch, s.cursor) == (4, 0)


def test_world_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    s = ElasticSampler(9, 1, shuffle=False)
    assert s.world() == (2, 3)
    assert [list(x) for x in s] == [[2], [5], [8]]
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(ValueError, match="rank must be in"):
        s.world()


@pytest.mark.parametrize(
    ("key", "value"), [("seed", 9), ("num_samples", 11), ("shuffle", False)]
)
def test_loading_a_state_with_a_different_order_is_refused(key: str, value: object) -> None:
    s = ElasticSampler(10, 2, rank=0, world_size=1)
    state = {**s.state_dict(), key: value}
    with pytest.raises(ValueError, match=f"{key}="):
        s.load_state_dict(state)


def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        ElasticSampler(10, 0)
    with pytest.raises(ValueError, match="rank must be in"):
        ElasticSampler(10, 1, rank=4, world_size=4)
    s = ElasticSampler(10, 1, rank=0, world_size=1)
    with pytest.raises(ValueError, match="past the end"):
        s.set_position(0, 11)
