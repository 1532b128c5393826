"""The Slurm side of node health, without a cluster: quarantined nodes in sbatch's
`--exclude`, Slurm's drains and maintenance reservations read from its output, and the
warnings turned into perdure's node commands."""

from __future__ import annotations

import time

import pytest

from perdure.backends.slurm import platform, slurmcmd
from perdure.core.spec import SlurmSpec

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
