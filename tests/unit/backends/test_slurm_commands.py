"""The Slurm backend's pure parts: sbatch arguments, squeue/sinfo parsing, names, the spec."""

from __future__ import annotations

import pytest

from perdure.backends.slurm import allocs, slurmcmd
from perdure.core.clusterspec import SlurmSpec, parse_cluster
from perdure.core.specread import SpecError

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
    text = (f"a{S}2{S}idle{S}10.0.0.11{S}(null)\nb{S}2{S}down*{S}10.0.0.12{S}gpu:4\n"
            f"a{S}2{S}idle{S}10.0.0.11{S}(null)\n")
    nodes = slurmcmd.parse_nodes(text)
    assert [(n.name, n.cpus, n.usable, n.gpus) for n in nodes] == [("a", 2, True, 0),
                                                                   ("b", 2, False, 4)]


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


def test_gres_gpu_counts() -> None:
    assert slurmcmd.gres_gpus("(null)") == 0
    assert slurmcmd.gres_gpus("gpu:4") == 4
    assert slurmcmd.gres_gpus("gpu:a100:2(S:0-1),gpu:v100:1") == 3
    assert slurmcmd.gres_gpus("gpu:tesla:8(S:0,1),mps:400") == 8


def test_a_gpu_pool_asks_slurm_for_gpus_per_node_and_the_agent_step_holds_them() -> None:
    args = slurmcmd.sbatch_args(SlurmSpec(), "n", ["a", "b"], 2, 10, gpus=4)
    assert "--gres=gpu:4" in args and "--ntasks-per-node=1" in args
    assert not any(a.startswith("--gres") for a in slurmcmd.sbatch_args(SlurmSpec(), "n", ["a"],
                                                                        1, 10))
    alloc = allocs.Alloc("job-1", "1", ["a", "b"], slurm_id="12", gpus=4)
    agent = allocs.srun_args(alloc, "a", "perdure-agent", ["python", "-m", "x"], gpus=True)
    watcher = allocs.srun_args(alloc, "a", "job-1.1.w-0.1", ["python", "-m", "y"])
    assert "--gres=gpu:4" in agent and "--overlap" in agent and "--jobid=12" in agent
    assert "--gres=none" in watcher  # a replica's step shows it to Slurm, holds no GPU
    assert agent[-3:] == ["python", "-m", "x"]
    plain = allocs.srun_args(allocs.Alloc("job-1", "1", ["a"], slurm_id="13"), "a", "s", ["x"],
                             gpus=True)
    assert not any(a.startswith("--gres") for a in plain)  # no GPUs: no gres at all


def test_a_replicas_gpus_are_the_agents_slurm_gpus_at_the_chosen_positions() -> None:
    from perdure.backends.agents.agent import replica_gpus

    assert replica_gpus("1,2", "4,5,6,7") == "5,6"
    assert replica_gpus("0", "0,1") == "0"
    assert replica_gpus("1", None) == "1"  # no gres: the controller's names stand
    assert replica_gpus("", "4,5") == ""  # a replica without GPUs on a GPU node sees none


def test_a_gpu_launch_reaches_sbatch_and_the_agent_through_the_backend(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend keeps the Launch's GPUs (its env rebuilt by the relay) and sizes the
    holder job's gres from them; the agent's record carries the log cap."""
    from pathlib import Path

    from perdure.backends.slurm import backend as sb
    from perdure.core.clusterspec import parse_cluster
    from perdure.core.events import Launch

    submitted: list[list[str]] = []
    monkeypatch.setattr(slurmcmd, "run", lambda args, timeout=0, stdin=None: (
        submitted.append(args) or "77\n") if args[0] == "sbatch" else "")
    monkeypatch.setattr(slurmcmd, "own_address", lambda: "127.0.0.1")
    monkeypatch.setenv("PERDURE_LOG_MAX_MB", "3")
    cluster = parse_cluster("backend: slurm\nnodes: [{name: a, slots: 2, gpus: 4}]\n")
    backend = sb.SlurmBackend(Path(str(tmp_path)) / "state", cluster)
    try:
        assert backend.links.log_max_bytes == 3 << 20
        for i in range(2):
            backend.launch(Launch(f"job-1.1.w-{i}.1", "job-1", f"w-{i}", "a",
                                  ("python", "t.py"), {"PERDURE_ATTEMPT": "1",
                                                       "CUDA_VISIBLE_DEVICES": f"{2 * i},"
                                                       f"{2 * i + 1}"},
                                  "/", None, str(Path(str(tmp_path)) / f"w{i}"), gpus=2))
        tracked = backend.links.active["job-1.1.w-1.1"]
        assert tracked.launch.gpus == 2
        backend._submit([])
        (args,) = submitted
        assert "--gres=gpu:4" in args and "--cpus-per-task=2" in args, args
    finally:
        backend.close()
