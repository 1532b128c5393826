"""The membership barrier, its members played by threads of this process, on both transports'
stores (a real FileStore; the controller's relay): every member or none, a newer round wins,
survivors go on without a member still starting, and a late member waits for the next
generation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.distributed  # noqa: F401  (imported here once, not first by members' threads)
from transport_pair import transport_of

from perdure.runtime.elastic.barrier import Formed, Partial, meet
from perdure.runtime.elastic.rendezvous import Member, Round
from perdure.runtime.transport import Transport

NAMES = ("worker-0", "worker-1", "worker-2")


def round_of(n: int = 0, names: tuple[str, ...] = NAMES) -> Round:
    return Round("j", 1, n, "test", 0.0, tuple(Member(r, i, "a") for i, r in enumerate(names)))


def together(calls: dict[str, Callable[[], tuple[Formed, Any]]]) -> dict[str, Formed]:
    out: dict[str, Formed] = {}

    def run(name: str, call: Callable[[], tuple[Formed, Any]]) -> None:
        out[name] = call()[0]

    threads = [threading.Thread(target=run, args=item) for item in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def never() -> bool:
    return False


@pytest.fixture(params=["file", "net"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Transport]:
    with transport_of(request.param, tmp_path) as t:
        yield t


def test_all_members_meet(where: Transport) -> None:
    rnd, deadline = round_of(), time.monotonic() + 10
    out = together({r: lambda r=r: meet(where, rnd, r, deadline=deadline, superseded=never)
                    for r in NAMES})
    assert {f.status for f in out.values()} == {"ok"}
    assert {f.generation for f in out.values()} == {0}


def test_a_missing_member_times_out_everyone_alike(where: Transport) -> None:
    rnd = round_of()
    out = together({r: lambda r=r: meet(where, rnd, r, deadline=time.monotonic() + 0.3,
                                        superseded=never) for r in NAMES[:2]})
    assert {f.status for f in out.values()} == {"timeout"}


def test_a_newer_round_abandons_the_barrier(where: Transport) -> None:
    rnd, newer = round_of(), threading.Event()
    threading.Timer(0.2, newer.set).start()
    out = together({r: lambda r=r: meet(where, rnd, r, deadline=time.monotonic() + 10,
                                        superseded=newer.is_set) for r in NAMES[:2]})
    assert {f.status for f in out.values()} == {"superseded"}


def test_survivors_go_on_without_a_late_member_who_then_waits_for_them(where: Transport) -> None:
    rnd, deadline = round_of(), time.monotonic() + 20
    policy = Partial(time.monotonic() + 0.2, lambda present: len(present) >= 2)
    out = together({r: lambda r=r: meet(where, rnd, r, deadline=deadline, superseded=never,
                                        partial=policy) for r in NAMES[:2]})
    assert {(f.status, f.present) for f in out.values()} == {("partial", NAMES[:2])}

    # worker-2 arrives late: it is told it was left out, then waits for the next generation,
    # which the others open when they come back for the full round (broken_generation=0)
    excluded = threading.Event()
    late: dict[str, Formed] = {}
    t = threading.Thread(target=lambda: late.update(w2=meet(
        where, rnd, "worker-2", deadline=deadline, superseded=never,
        on_excluded=excluded.set)[0]))
    t.start()
    assert excluded.wait(10)
    back = together({r: lambda r=r: meet(where, rnd, r, deadline=deadline, superseded=never,
                                         broken_generation=0) for r in NAMES[:2]})
    t.join(10)
    assert {f.status for f in back.values()} == {"ok"} and late["w2"].status == "ok"
    assert {f.generation for f in [*back.values(), late["w2"]]} == {1}


def test_too_few_present_never_go_partial(where: Transport) -> None:
    rnd = round_of()
    policy = Partial(time.monotonic() + 0.05, lambda present: len(present) >= 3)
    out = together({r: lambda r=r: meet(where, rnd, r, deadline=time.monotonic() + 0.5,
                                        superseded=never, partial=policy) for r in NAMES[:2]})
    assert {f.status for f in out.values()} == {"timeout"}


def test_a_member_that_registered_and_died_cannot_complete_the_group(where: Transport) -> None:
    rnd = round_of(names=NAMES[:2])
    store = where.round_store(rnd.store_name)
    store.set("g0/member/worker-1", "1")  # a launch of worker-1 registered, then died
    store.add("g0/present", 1)
    formed, _ = meet(where, rnd, "worker-0", deadline=time.monotonic() + 0.5,
                     superseded=never)
    # presence was complete, but nobody confirmed for worker-1: no group with a dead member
    assert formed.status == "timeout"
