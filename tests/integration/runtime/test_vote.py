"""StopVote on real gloo ranks: every rank stops at the same step, one step after the first
rank saw the notice, with other collectives running between the votes."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from forked_ranks import in_gloo_group, run_ranks

from perdure.runtime import StopVote

WORLD = 3


def _rank_main(rank: int, store: str, out: str, notice: dict[int, int],
               within: float | None = None, step_s: float = 0.0) -> None:
    def body() -> dict[str, Any]:
        vote, stopped, sums = StopVote(within=within), None, []
        for step in range(1, 40):
            time.sleep(step_s)
            grad = torch.full((1000,), float(rank + step))
            dist.all_reduce(grad)  # the step's own collective (DDP's gradients)
            sums.append(float(grad[0]))
            if vote.poll(step >= notice.get(rank, 10**9)):
                stopped = step
                break
        vote.close()
        return {"stopped": stopped, "sums": sums}

    in_gloo_group(rank, WORLD, store, out, body)


def _run(tmp_path: Path, notice: dict[int, int], within: float | None = None,
         step_s: float = 0.0) -> list[dict[str, Any]]:
    out = tmp_path / uuid.uuid4().hex
    out.mkdir()
    return run_ranks(out, WORLD, _rank_main, str(out / "store"), str(out), notice, within,
                     step_s, timeout=60)


@pytest.mark.parametrize("notice", [{1: 7}, {0: 12, 2: 5}, {2: 1}])
def test_all_ranks_stop_one_step_after_the_first_notice(tmp_path: Path,
                                                         notice: dict[int, int]) -> None:
    results = _run(tmp_path, notice)
    first = min(notice.values())
    assert [r["stopped"] for r in results] == [first + 1] * WORLD
    # The votes in flight never mixed with the step's own all-reduce.
    expected = [float(sum(r + s for r in range(WORLD))) for s in range(1, first + 2)]
    assert all(r["sums"] == expected for r in results)


def test_voting_every_few_steps_stops_all_ranks_alike_within_the_bound(tmp_path: Path) -> None:
    # Steps of >= 10 ms and within=0.1 s: votes at most every 10 steps, so a notice at step 7
    # stops every rank at the same step, no later than step 17.
    results = _run(tmp_path, {1: 7}, within=0.1, step_s=0.01)
    stopped = {r["stopped"] for r in results}
    assert len(stopped) == 1, results
    assert 7 < stopped.pop() <= 17


def test_no_notice_never_stops(tmp_path: Path) -> None:
    assert [r["stopped"] for r in _run(tmp_path, {})] == [None] * WORLD


def test_without_a_process_group_the_flag_is_the_answer() -> None:
    for vote in (StopVote(), StopVote(within=1.0)):
        assert vote.poll(False) is False
        assert vote.poll(True) is True


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="within is -1"):
        StopVote(within=-1)


def _schedule_main(rank: int, store: str, out: str, notice_at: int) -> None:
    """maybe_save's schedule on real ranks: how often it asks for the Comm, and where the
    ranks agree on a notice that only rank 1 saw."""
    from perdure.runtime.checkpoint import schedule as sched
    from perdure.runtime.checkpoint.comm import Comm
    def body() -> dict[str, Any]:
        comm, asked = Comm(30.0), [0]

        def comm_of() -> Comm:
            asked[0] += 1
            return comm

        schedule = sched.SaveSchedule(None)
        schedule.within = 0.1
        saves, stopped = [], None
        for step in range(1, 200):
            time.sleep(0.01)
            sched.notice_pending = lambda s=step: rank == 1 and s >= notice_at  # type: ignore
            due, notice = schedule.decide(step % 25 == 0, rank == 2 and step == 60, comm_of)
            if due:
                saves.append(step)
            if notice:
                stopped = step
                break
        schedule.close()
        return {"asked": asked[0], "saves": saves, "stopped": stopped}

    in_gloo_group(rank, WORLD, store, out, body)


def test_the_save_schedule_touches_no_group_between_votes(tmp_path: Path) -> None:
    # Steps of >= 10 ms, votes every ~0.1 s: of 100+ calls only the votes, the saves and the
    # first call ask for the Comm; every rank saves at 25, 50, 75, 100, and at one step soon
    # after 60, when only rank 2's clock said a save was due, and stops at one step.
    results = run_ranks(tmp_path, WORLD, _schedule_main, str(tmp_path / "store"), str(tmp_path),
                        110, timeout=60)
    assert {r["stopped"] for r in results} == {results[0]["stopped"]}
    stopped = results[0]["stopped"]
    assert 110 < stopped <= 125, results
    timed = results[0]["saves"][2]
    assert 60 < timed <= 72, results
    assert all(r["saves"] == [25, 50, timed, 75, 100] for r in results), results
    assert all(r["asked"] < stopped // 3 for r in results), results
