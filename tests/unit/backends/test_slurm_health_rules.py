"""The Slurm side of node health, without a cluster: quarantined nodes in sbatch's
`--exclude`, Slurm's drains and maintenance reservations read from its output, and the
warnings turned into perdure's node commands, and what the agents check their node with."""

from __future__ import annotations

import time

import pytest

from perdure.backends.slurm import allocs, platform, slurmcmd
from perdure.core.clusterspec import SlurmSpec
from perdure.core.events import Launch
from perdure.core.healthspec import HealthSpec

SEP = slurmcmd.SEP


def test_quarantined_nodes_are_excluded_from_an_allocation() -> None:
    args = slurmcmd.sbatch_args(SlurmSpec(), "perdure.j.1", ["a", "c"], 2, 40,
                                exclude=["d", "b"])
    assert "--exclude=b,d" in args and "--nodelist=a,c" in args
    assert not any(a.startswith("--exclude") for a in
                   slurmcmd.sbatch_args(SlurmSpec(), "perdure.j.1", ["a"], 2, 40))


def test_drains_are_read_with_their_reasons() -> None:
    text = "\n".join(SEP.join(x) for x in [
        ("a", "mix", "none"), ("b", "drng", "fan failing"), ("c", "drain*", "Not responding"),
        ("d", "drained", "perdure quarantine: 2 failures"), ("e", "idle", "none")])
    assert slurmcmd.parse_drains(text) == {
        "b": "fan failing", "c": "Not responding", "d": "perdure quarantine: 2 failures"}


def test_maintenance_reservations_are_read() -> None:
    text = ("ReservationName=maint StartTime=2026-12-06T07:00:00 EndTime=2026-12-06T08:00:00 "
            "Duration=01:00:00 Nodes=b,c NodeCnt=2 CoreCnt=4 Features=(null) "
            "PartitionName=(null) Flags=MAINT,SPEC_NODES TRES=cpu=4 Users=root "
            "Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) "
            "Watts=n/a MaxStartDelay=(null)\n"
            "ReservationName=team StartTime=2026-12-06T09:00:00 EndTime=2026-12-06T10:00:00 "
            "Duration=01:00:00 Nodes=a NodeCnt=1 Flags=SPEC_NODES State=INACTIVE\n")
    got = slurmcmd.parse_reservations(text)
    assert [(r.name, r.start, r.nodes, r.maint) for r in got] == [
        ("maint", "2026-12-06T07:00:00", "b,c", True),
        ("team", "2026-12-06T09:00:00", "a", False)]


def test_warnings_become_drains_of_busy_nodes_and_end_with_node_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found: dict[str, str] = {"b": "Slurm drains it: fan failing", "c": "Slurm drains it"}
    watch = platform.PlatformWatch("main")
    monkeypatch.setattr(watch, "warnings", lambda now: dict(found))
    out: list[object] = []
    watch.step({"a", "b", "d"}, fenced=set(), out=out)  # type: ignore[arg-type]
    assert [(c.kind, c.target, c.why) for c in out] == [  # type: ignore[attr-defined]
        ("drain-node", "b", "Slurm drains it: fan failing")]
    out.clear()
    watch._next = 0.0
    watch.step({"a", "b", "d"}, fenced=set(), out=out)  # type: ignore[arg-type]
    assert out == []  # said once
    found.pop("b")
    watch._next = 0.0
    watch.step({"a"}, fenced=set(), out=out)  # type: ignore[arg-type]
    assert [(c.kind, c.target) for c in out] == [("node-back", "b")]  # type: ignore[attr-defined]
    # a node perdure quarantined (and drained in Slurm itself) is no platform warning
    found["d"] = "Slurm drains it: perdure quarantine: 1 failure"
    out.clear()
    watch._next = 0.0
    watch.step({"d"}, fenced={"d"}, out=out)  # type: ignore[arg-type]
    assert out == []


def test_a_maintenance_reservation_soon_warns_of_its_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 300))
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 7200))
    monkeypatch.setattr(slurmcmd, "drains", lambda partition: {})
    monkeypatch.setattr(slurmcmd, "reservations", lambda: [
        slurmcmd.Reservation("maint", soon, "b", True),
        slurmcmd.Reservation("later", later, "c", True),
        slurmcmd.Reservation("team", soon, "a", False)])
    monkeypatch.setattr(slurmcmd, "expand", lambda nodes: nodes.split(","))
    got = platform.PlatformWatch("main").warnings(time.time())
    assert got == {"b": f"Slurm maintenance reservation maint starts at {soon}"}


def test_an_allocations_agents_check_their_node_in_the_jobs_environment() -> None:
    health = HealthSpec(preflight=["perdure", "health-check"], timeout_seconds=30)
    alloc = allocs.Alloc("job-1", "2", ["a", "b"])
    env = {"PERDURE_ATTEMPT": "2", "PERDURE_CHECKPOINT_DIR": "/ckpt", "PERDURE_JOB_SECRET": "x"}
    older = Launch("job-1.1.w-0.1", "job-1", "worker-0", "a", ("true",),
                   {"PERDURE_ATTEMPT": "1"}, "/old", None, "/tmp/x")
    mine = Launch("job-1.2.w-0.1", "job-1", "worker-0", "a", ("true",), env, "/work", None,
                  "/tmp/x")
    other = Launch("job-9.2.w-0.1", "job-9", "worker-0", "a", ("true",), {}, "/", None, "/x")
    assert allocs.node_check(alloc, health, [other, older, mine]) == {
        "argv": ["perdure", "health-check"], "timeout": 30.0, "cwd": "/work",
        "env": {"PERDURE_ATTEMPT": "2", "PERDURE_CHECKPOINT_DIR": "/ckpt",
                "PERDURE_JOB_ID": "job-1"}}  # never the relay's secret
    spare = allocs.node_check(alloc, health, [])  # a spare's allocation: no launch of its own
    assert spare is not None and spare["env"] == {"PERDURE_JOB_ID": "job-1",
                                                  "PERDURE_ATTEMPT": "2"}
    assert allocs.node_check(alloc, HealthSpec(), [mine]) is None  # no preflight
