"""Garbage collection between ticks instead of inside them.

Side effects: sets the process's collection thresholds while a controller runs, collects and
freezes the collector's generations. A tick of a 16,384-replica job leaves tens of thousands
of young objects (replica copies, launches, the backend's records); a young collection that
lands inside a tick scans them for 10-33 ms, about every 10 ticks (bench/controller.py
--only big). The controller collects instead after each tick, before it sleeps: young
objects as soon as a few thousand were allocated, the middle generation at its usual
ratio, a full collection only when the tick left enough idle time for one (or when it is
long overdue). The automatic collector stays on with a high young threshold: a valve for a
caller that ticks without pausing, never the usual path.

A tick that leaves a burst of young objects (a 16,384-replica round: its replica copies,
stops and launches, which the snapshot and the backend keep) has them frozen unscanned
instead: after a group restart's placing tick a young collection took 25 ms and the middle
ones after it 27-36 ms between two ticks, and none freed anything (bench/controller.py
--only big); `gc.freeze()` costs no scan. Cycles among them are freed at the next thaw; the frozen
generation grows that way only to twice what the last thaw left, plus BURST_ROOM: past that,
a burst is collected as any young objects are, and the next full collection thaws. So are
the survivors of a young collection frozen (the middle generation then holds few).
"""

from __future__ import annotations

import gc
import time

# Allocations (net) since the last young collection that make one worth doing between
# ticks; the automatic collector's own young threshold while a controller runs (a valve).
YOUNG = 5_000
VALVE = 200_000
# Young collections per middle one, middle ones per full one (CPython's default ratios).
MIDDLE_EVERY = 10
FULL_EVERY = 10
# A full collection is started only with this much idle time left before the next tick,
# unless that many more are due (then it runs anyway: memory must not grow unbounded).
FULL_NEEDS_S = 0.015
FULL_OVERDUE = 4
# Young objects left by one tick that are frozen without a scan, and how far bursts may grow
# the frozen generation beyond twice what it held after the last thaw.
BURST = 10_000
BURST_ROOM = 300_000
# Every so many full collections, what was frozen is collected again too: a record frozen
# alive that later became part of a garbage cycle is freed then (memory stays bounded).
THAW_EVERY = 8


class Collector:
    """The controller's collections: `start` as it starts, `between_ticks` after each tick,
    `close` as it stops (the thresholds it found are put back)."""

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None
        self._full_due = 0  # full collections due but put off for lack of idle time
        self._fulls = 0
        self._young_since = 0  # young collections since the last middle or full one
        self._middle_since = 0  # middle collections since the last full one
        self.collections = [0, 0, 0]  # made between ticks, per generation
        self.bursts = 0  # bursts of young objects frozen unscanned
        self._thawed_left = 0  # objects frozen after the last thaw
        self._frozen = 0  # objects frozen now, at most (young ones added as they were)
        self._thaw_due = False  # frozen past its room: the next full collection thaws
        self.seconds = 0.0  # spent in them

    def start(self) -> None:
        if self._saved is None:
            self._saved = gc.get_threshold()
        gc.set_threshold(VALVE, MIDDLE_EVERY, FULL_EVERY)

    def close(self) -> None:
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
            gc.unfreeze()  # the process goes on without this controller's records

    def _room(self, young: int) -> bool:
        """Whether `young` more objects may be frozen before the next thaw; if not, the
        next full collection thaws."""
        limit = 2 * self._thawed_left + BURST_ROOM
        if self._frozen + young <= limit:
            return True
        # The estimate counts every object frozen, dead since or not: count them (a walk
        # over the frozen generation, ~5 ms at 160,000: only when the estimate is past it)
        self._frozen = gc.get_freeze_count()
        if self._frozen + young <= limit:
            return True
        self._thaw_due = True
        return False

    def between_ticks(self, idle_s: float) -> int | None:
        """Collect what is due, given `idle_s` seconds until the next tick; the generation
        collected, None if none was."""
        # Its own counts of collections: gc.freeze() resets the collector's.
        young, middle, old = gc.get_count()[0], self._young_since, self._middle_since
        if young >= BURST and self._room(young):
            gc.freeze()  # no scan: the records a big round made (cycles: at the next thaw)
            self._frozen += young
            self._young_since += 1  # the schedule goes on as after a young collection
            self.bursts += 1
            return None
        gen: int | None = None
        if old >= FULL_EVERY and (idle_s >= FULL_NEEDS_S or self._full_due >= FULL_OVERDUE):
            gen = 2
        elif old >= FULL_EVERY and middle >= MIDDLE_EVERY:
            self._full_due += 1  # put off: no idle time for it now
            gen = 1
        elif middle >= MIDDLE_EVERY:
            gen = 1
        elif young >= YOUNG:
            gen = 0
        if gen is None:
            return None
        began = time.perf_counter()
        thawed = False
        if gen == 2:
            self._fulls += 1
            thawed = self._fulls % THAW_EVERY == 0 or self._thaw_due
            if thawed:
                gc.unfreeze()
                self._thaw_due = False
        gc.collect(gen)
        self._young_since = 0 if gen >= 1 else self._young_since + 1
        self._middle_since = 0 if gen == 2 else self._middle_since + (gen == 1)
        if gen == 2:
            self._full_due = 0
        if gen >= 1 or self._room(young):
            # What survived a collection lives long (the jobs' records, a round's replica
            # copies): out of every later collection's scan, and freed by reference
            # counting as ever (cycles among them: at the next thaw).
            gc.freeze()
            self._frozen += young
        if thawed:  # (a walk over every frozen object: once a thaw, which scans them all)
            self._thawed_left = self._frozen = gc.get_freeze_count()
        self.seconds += time.perf_counter() - began
        self.collections[gen] += 1
        return gen
