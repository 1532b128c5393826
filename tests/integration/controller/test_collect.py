"""The controller collects garbage between ticks (controller.collect): the collector it
found is put back when it stops, young objects are collected after the tick that made them,
and memory stays bounded even when ticks leave no idle time for a full collection (a
garbage cycle that reached the oldest generation, frozen, is still freed)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from perdure.controller import collect
from perdure.controller.collect import Collector


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    for name, value in (("YOUNG", 200), ("MIDDLE_EVERY", 3), ("FULL_EVERY", 3),
                        ("FULL_OVERDUE", 2), ("THAW_EVERY", 2)):
        monkeypatch.setattr(collect, name, value)
    found = gc.get_threshold()
    c = Collector()
    c.start()
    try:
        yield c
    finally:
        c.close()
        assert gc.get_threshold() == found and gc.get_freeze_count() == 0


def tick(keep: list[object]) -> None:
    """A tick's allocations, kept (as a tick's records are, for a while)."""
    keep.append([{} for _ in range(300)])
    if len(keep) > 400:
        keep.clear()


def test_young_objects_are_collected_between_ticks(collector: Collector) -> None:
    assert gc.get_threshold()[0] == collect.VALVE  # the automatic collector: a valve only
    keep: list[object] = []
    made = []
    for _ in range(40):
        tick(keep)
        made.append(collector.between_ticks(0.02))
    assert made.count(0) >= 10 and 1 in made and 2 in made
    assert gc.get_count()[0] < 2 * collect.YOUNG


def test_old_garbage_is_freed_without_idle_time(collector: Collector) -> None:
    keep: list[object] = []
    old = Cycle()
    gone = weakref.ref(old)
    for _ in range(30):  # it survives collections: reaches the oldest generation, frozen
        tick(keep)
        collector.between_ticks(0.02)
    assert gone() is not None and gc.get_freeze_count() > 0
    del old  # garbage now, only a collection of what was frozen can free it
    for _ in range(2000):  # ticks back to back: never idle enough for a full collection
        tick(keep)
        collector.between_ticks(0.0)
        if gone() is None:
            break
    assert gone() is None


def test_a_burst_of_young_objects_is_frozen_without_a_scan(
        collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick that leaves a burst (a big round's replica copies) is followed by no
    collection: the objects are frozen, not scanned."""
    monkeypatch.setattr(collect, "BURST", 2_000)
    keep: list[object] = [[] for _ in range(3_000)]  # the records a round made, kept
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        frozen = gc.get_freeze_count()
        assert collector.between_ticks(0.02) is None
    finally:
        gc.callbacks.remove(note)
    assert seen == [] and collector.bursts == 1
    assert gc.get_freeze_count() >= frozen + len(keep)


def test_bursts_of_garbage_cycles_keep_memory_bounded(
        collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bursts frozen unscanned grow the frozen generation only so far (twice what a thaw
    left, plus BURST_ROOM): past that they are collected, and a thaw frees the cycles that
    were frozen."""
    monkeypatch.setattr(collect, "BURST", 1_000)
    monkeypatch.setattr(collect, "BURST_ROOM", 6_000)
    gc.collect()
    live = len(gc.get_objects())  # the test process's own (pytest's): may all be frozen
    first = Cycle()
    gone = weakref.ref(first)
    del first
    most = 0
    # more garbage than the bound, however big the test process is: each tick leaves 5,000
    # cycles (10,000 objects), garbage at once
    for _ in range((2 * live + collect.BURST_ROOM) // 10_000 + 10):
        for _ in range(5_000):
            Cycle()
        collector.between_ticks(0.02)
        most = max(most, gc.get_freeze_count())
    assert collector.bursts >= 2
    assert most < 2 * live + collect.BURST_ROOM + 2 * 10_000  # not all that was made
    assert gone() is None
