"""ShardDataset read directly (no DataLoader): positions, exact resume, merged re-deal."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perdure.runtime import ShardDataset
from perdure.runtime.data import merge_shard_states

SIZES = [3, 0, 5, 1, 4, 2, 6, 3, 1, 4]  # samples per shard; shard 1 is empty


class Reader:
    """Shard "k" holds samples (k, 0..SIZES[k]-1) and a random number each; counts opens."""

    def __init__(self) -> None:
        self.opened: list[int] = []

    def __call__(self, name: str) -> Iterator[tuple[int, int, float]]:
        shard = int(name)
        self.opened.append(shard)
        for j in range(SIZES[shard]):
            yield shard, j, random.random()


Sample = tuple[int, int, float]


def _dataset(reader: Reader, rank: int = 0, world: int = 1, **kw: object) -> ShardDataset[Sample]:
    return ShardDataset([str(i) for i in range(len(SIZES))], reader, rank=rank,
                        world_size=world, **kw)  # type: ignore[arg-type,unused-ignore]


def _take(it: Iterator[tuple[int, int, float]], k: int) -> list[tuple[int, int, float]]:
    return [next(it) for _ in range(k)]


def test_one_epoch_over_ranks_reads_every_sample_once() -> None:
    world = 3
    seen = Counter((s, j) for r in range(world) for s, j, _ in _dataset(Reader(), r, world))
    assert set(seen) == {(s, j) for s, n in enumerate(SIZES) for j in range(n)}
    assert set(seen.values()) == {1}


@pytest.mark.parametrize("stop", [0, 1, 4, 9, 17, 28, 29])
def test_resume_continues_exactly_without_reopening_finished_shards(stop: int) -> None:
    whole = list(_dataset(Reader(), seed=4))
    first = _dataset(Reader(), seed=4)
    it = iter(first)
    head = _take(it, stop)
    state = first.state_dict()
    assert json.loads(json.dumps(state)) == state
    reader = Reader()
    second = _dataset(reader, seed=4)
    second.load_state_dict(state)
    tail = list(second)
    assert head + tail == whole  # the random values replay too: seeded per shard
    finished = {s for s, _, _ in head} - {s for s, _, _ in tail}
    assert not finished & set(reader.opened), "a consumed shard was read again"
    assert second.state_dict()["streams"]["done"] == [len(SIZES)]


def test_position_after_a_shards_last_sample_points_past_it() -> None:
    ds = _dataset(Reader(), shuffle=False)
    it = iter(ds)
    _take(it, 3)  # all of shard 0
    columns = ds.state_dict()["streams"]
    assert (columns["done"], columns["offset"]) == ([1], [0])


def test_epochs_deal_shards_in_different_orders() -> None:
    ds = _dataset(Reader())
    first = [s for s, _, _ in ds]
    ds.set_epoch(1)
    second = [s for s, _, _ in ds]
    assert Counter(first) == Counter(second) and first != second


@settings(max_examples=40, deadline=None)
@given(
    worlds=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    stops=st.lists(st.integers(0, 12), min_size=4, max_size=4),
)
def test_merged_states_reload_on_any_world_size_exactly_once(
    worlds: list[int], stops: list[int]
) -> None:
    consumed: list[tuple[int, int]] = []
    merged: dict[str, object] | None = None
    for i, world in enumerate([*worlds, 3]):
        ranks = [_dataset(Reader(), r, world) for r in range(world)]
        last = i == len(worlds)
        for r, ds in enumerate(ranks):
            if merged is not None:
                ds.load_state_dict(merged)
            it = iter(ds)
            limit = None if last else stops[(i + r) % len(stops)]
            for n, (s, j, _) in enumerate(it):
                consumed.append((s, j))
                if limit is not None and n + 1 >= limit:
                    break
        merged = merge_shard_states([ds.state_dict() for ds in ranks])
    counts = Counter(consumed)
    assert set(counts) == {(s, j) for s, n in enumerate(SIZES) for j in range(n)}
    assert set(counts.values()) == {1}


def test_a_rank_state_on_another_topology_says_to_merge() -> None:
    ds = _dataset(Reader(), 0, 2)
    next(iter(ds))
    other = _dataset(Reader(), 0, 3)
    other.load_state_dict(ds.state_dict())
    with pytest.raises(ValueError, match="merge_shard_states"):
        next(iter(other))


def test_merge_needs_every_rank() -> None:
    states = [_dataset(Reader(), r, 3).state_dict() for r in range(3)]
    with pytest.raises(ValueError, match=r"one state per rank 0..2, got ranks \[0, 2\]"):
        merge_shard_states([states[0], states[2]])


def test_a_state_from_other_shards_is_refused() -> None:
    state = _dataset(Reader()).state_dict()
    state["num_shards"] = 4
    with pytest.raises(ValueError, match="num_shards=4"):
        _dataset(Reader()).load_state_dict(state)


def test_reading_does_not_shift_the_callers_random_stream() -> None:
    random.seed(1)
    expected = [random.random() for _ in range(3)]
    random.seed(1)
    it = iter(_dataset(Reader()))
    got = []
    for _ in range(3):
        next(it)
        got.append(random.random())
    assert got == expected
