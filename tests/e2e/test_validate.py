"""`perdure validate SPEC [--cluster FILE]` (issue 19.4): the spec, the cluster file and the
pair are checked as submit checks them; an unknown field names the closest one and the
README's spec reference. In-process: the same command, without a process start per case."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from perdure.cli.main import app

JOB = "name: mlp\npools: [{name: worker, replicas: %d, command: [python, train.py]}]\n%s"
CLUSTER = "backend: local\nnodes: [{name: a, slots: 2}, {name: b, slots: 2}]\n" \
          "queues: [{name: default, quota: 4}]\n"


def validate(tmp_path: Path, job: str, cluster: str | None = None) -> tuple[int, str, str]:
    (tmp_path / "job.yaml").write_text(job)
    args = ["--state-dir", str(tmp_path / "state"), "validate", str(tmp_path / "job.yaml")]
    if cluster is not None:
        (tmp_path / "cluster.yaml").write_text(cluster)
        args += ["--cluster", str(tmp_path / "cluster.yaml")]
    r = CliRunner().invoke(app, args)
    assert "Traceback" not in r.stdout + r.stderr
    return r.exit_code, r.stdout, r.stderr


def test_a_job_and_cluster_that_fit(tmp_path: Path) -> None:
    code, out, _ = validate(tmp_path, JOB % (4, ""), CLUSTER)
    assert code == 0
    assert "job.yaml: valid: job mlp, 4 replicas, 4 slots, queue default" in out
    assert "backend local, nodes a (2 slots), b (2 slots); queues default (quota 4)" in out
    assert not (tmp_path / "state").exists()  # validate stores nothing


@pytest.mark.parametrize(("job", "cluster", "says"), [
    (JOB % (4, ""), CLUSTER.replace("slots: 2}]", "slot: 2}]"),
     "nodes.1.slot: unknown field; did you mean `slots`?"),
    (JOB % (4, ""), CLUSTER.replace("queues:", "queue:"), "queue: unknown field; did you "
     "mean `queues`?"),
    ((JOB % (4, "")).replace("replicas:", "replica:"), CLUSTER,
     "pools.0.replica: unknown field; did you mean `replicas`?"),
    (JOB % (4, "restart: {max_restart: 2}\n"), None,
     "restart.max_restart: unknown field; did you mean `max_replica_restarts`?"),
    (JOB % (6, ""), CLUSTER, "quota of 4: it could never start"),
    (JOB % (5, ""), CLUSTER.replace("quota: 4", "quota: 8"),
     "the cluster's nodes have 4 in all"),
    (JOB % (2, "queue: team-a\n"), CLUSTER, "unknown queue 'team-a'"),
    (JOB % (2, ""), "backend: ray\nnodes: [{name: a, slots: 2}]\n",
     "a path on the controller's machine only"),
])
def test_each_problem_is_named(tmp_path: Path, job: str, cluster: str | None, says: str) -> None:
    code, out, err = validate(tmp_path, job, cluster)
    assert code == 2 and out == "" and says in err, err


def test_an_unknown_field_points_to_the_spec_reference(tmp_path: Path) -> None:
    _, _, err = validate(tmp_path, JOB % (2, "zzz: 1\n"))
    assert "zzz: unknown field; the fields here are name, queue, priority, pools" in err
    assert "the spec reference, docs/reference/spec.md" in err
    page = (Path(__file__).parents[2] / "docs" / "reference" / "spec.md").read_text()
    assert "# Job spec and cluster file" in page and "`pools[].replicas`" in page
