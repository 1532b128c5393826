"""The Slurm backend's pure parts: sbatch arguments, squeue/sinfo parsing, names, the spec."""

from __future__ import annotations

import pytest

from perdure.backends.slurm import allocs, slurmcmd
from perdure.core.spec import SlurmSpec, SpecError, parse_cluster

S = slurmcmd.SEP


def test_sbatch_holds_the_nodes_without_killing_on_a_node_failure() -> None:
    spec = SlurmSpec(partition="main", account="proj", qos="high", time_limit="2:00:00",
                     sbatch_args=["--exclusive"])
    args = slurmcmd.sbatch_args(spec, "perdure.x.job-1.1", ["a", "b"], 2, 40)
    assert args[:2] == ["sbatch", "--parsable"]
    for want in ("--nodes=2", "--nodelist=a,b", "--cpus-per-task=2", "--no-kill",
                 "--signal=B:USR1@40", "--time=2:00:00", "--partition=main",
                 "--account=proj", "--qos=high", "--job-name=perdure.x.job-1.1"):
        assert want in args, want
    assert args[-1] == "--exclusive"  # the user's own arguments last: they win
    assert "--requeue" not in args  # a preempted allocation ends; perdure asks for a new one


def test_no_account_or_qos_unless_given() -> None:
    args = slurmcmd.sbatch_args(SlurmSpec(partition=None), "n", ["a"], 1, 10)
    assert not any(a.startswith(("--account", "--qos", "--partition")) for a in args)


def test_squeue_lines_parse_with_reasons_and_comments() -> None:
    text = (f"12{S}perdure.ab.job-1.1{S}PENDING{S}Resources{S}{S}(null)\n"
            f"13{S}perdure.ab.job-2.3{S}RUNNING{S}None{S}a,b{S}perdure:timelimit\n"
            "garbage line\n")
    jobs = slurmcmd.parse_jobs(text)
    assert jobs["12"].state == "PENDING" and jobs["12"].reason == "Resources"
    assert jobs["12"].comment == "" and not jobs["12"].running
    assert jobs["13"].running and jobs["13"].nodes == "a,b"
    assert jobs["13"].comment in slurmcmd.NOTICES
    assert set(jobs) == {"12", "13"}


def test_a_completing_job_is_not_running() -> None:
    info = slurmcmd.JobInfo("1", "n", "COMPLETING", "None", "a", "")
    assert not info.running


def test_sinfo_lines_parse_each_node_once() -> None:
    text = (f"a{S}2{S}idle{S}10.0.0.11\nb{S}2{S}down*{S}10.0.0.12\n"
            f"a{S}2{S}idle{S}10.0.0.11\n")
    nodes = slurmcmd.parse_nodes(text)
    assert [(n.name, n.cpus, n.usable) for n in nodes] == [("a", 2, True), ("b", 2, False)]


def test_allocation_names_belong_to_one_state_dir() -> None:
    mine = allocs.name_prefix("/srv/state")
    assert mine != allocs.name_prefix("/srv/other")
    assert allocs.parse_name(mine, f"{mine}ddp-mlp-1a2b3c.2") == ("ddp-mlp-1a2b3c", "2")
    assert allocs.parse_name(mine, "someone-elses-job") is None
    assert allocs.parse_name(mine, f"{mine}noattempt") is None


def test_srun_and_sbatch_never_see_the_controllers_own_job(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    env = allocs.slurm_env("s3cret")
    assert "SLURM_JOB_ID" not in env and env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert env[allocs.SECRET_ENV] == "s3cret"


def test_the_cluster_file_interface() -> None:
    cluster = parse_cluster("backend: slurm\nslurm: {partition: main, account: null, qos: null,"
                            " time_limit: '24:00:00', sbatch_args: [], shared_dirs: []}\n"
                            "nodes: [{name: a, slots: 2}, {name: b, slots: 2}]\n")
    assert cluster.slurm is not None and cluster.slurm.partition == "main"
    assert [n.name for n in cluster.nodes] == ["a", "b"]
    assert parse_cluster("backend: slurm\n").nodes == []  # discovered from sinfo


@pytest.mark.parametrize("text, field", [
    ("backend: slurm\nslurm: {time_limit: 'two hours'}\n", "slurm.time_limit"),
    ("backend: slurm\nslurm: {partiton: main}\n", "slurm.partiton"),
    ("backend: local\nnodes: [{name: a, slots: 1}]\nslurm: {}\n", "slurm:"),
])
def test_bad_slurm_sections_name_the_field(text: str, field: str) -> None:
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        parse_cluster(text)
