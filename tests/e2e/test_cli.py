"""The CLI as a user drives it: validate, submit, ls, describe, logs, cancel, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perdure.store.sqlite import Store

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def cli(tmp: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PERDURE, "--state-dir", str(tmp / "state"), *args],
                          capture_output=True, text=True, timeout=120, check=check)


def test_validate_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npools: [{name: worker, replicas: -1, command: [python]}]\n")
    r = cli(tmp_path, "validate", str(bad))
    assert r.returncode == 2
    assert "pools.0.replicas" in r.stderr and "-1" in r.stderr
    good = tmp_path / "good.yaml"
    good.write_text("name: x\npools: [{name: worker, replicas: 2, command: [python]}]\n")
    r = cli(tmp_path, "validate", str(good))
    assert r.returncode == 0 and "valid" in r.stdout


def test_missing_files_and_unknown_jobs_say_what_to_do(tmp_path: Path) -> None:
    r = cli(tmp_path, "validate", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = cli(tmp_path, "describe", "ghost")  # a state dir that does not exist: not created
    assert r.returncode == 2 and "no perdure state dir" in r.stderr
    assert not (tmp_path / "state").exists()
    bad_cluster = tmp_path / "c.yaml"
    bad_cluster.write_text("nodes: [{name: a, slots: 0}]")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\npools: [{name: worker, command: [python]}]\n")
    r = cli(tmp_path, "submit", str(spec), "--cluster", str(bad_cluster))
    assert r.returncode == 2 and "nodes.0.slots" in r.stderr


def test_unknown_queue_is_rejected_at_submit(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nqueue: gpu\npools: [{name: worker, command: [python]}]\n")
    r = cli(tmp_path, "submit", str(spec))
    assert r.returncode == 2 and "unknown queue 'gpu'" in r.stderr


def test_submit_ls_describe_logs_cancel(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: hello\npools: [{name: worker, replicas: 1, command: "
        "[python, -c, \"print('hello from', __import__('os').environ['PERDURE_REPLICA'])\"]}]\n")
    job = cli(tmp_path, "submit", str(spec), check=True).stdout.strip()
    assert job.startswith("hello-")
    queued = cli(tmp_path, "cancel", job, check=True)  # no controller: applied at once
    assert "CANCELLED" in queued.stdout and "no controller was running" in queued.stdout
    job2 = cli(tmp_path, "submit", str(spec), check=True).stdout.strip()
    r = cli(tmp_path, "controller", "--exit-when-idle", check=True)
    assert f"{job2} [state] SUCCEEDED" in r.stdout
    rows = json.loads(cli(tmp_path, "ls", "--json", check=True).stdout)
    assert {(x["id"], x["state"]) for x in rows} == {(job, "CANCELLED"), (job2, "SUCCEEDED")}
    assert "hello" in cli(tmp_path, "ls", check=True).stdout
    d = json.loads(cli(tmp_path, "describe", job2, "--json", check=True).stdout)
    assert {"id", "name", "state", "attempt", "error", "replicas", "events"} <= d.keys()
    assert set(d["replicas"][0]) >= {"name", "pool", "index", "state", "restarts", "exit_code",
                                     "node"}
    assert all({"time", "kind", "message"} <= e.keys() for e in d["events"])
    out = cli(tmp_path, "logs", job2, "--stdout", check=True).stdout
    assert "hello from worker-0" in out
    text = cli(tmp_path, "describe", "hello", check=True).stdout  # by name: the newest
    assert job2 in text and "Events:" in text


@pytest.mark.parametrize("args", [["chaos", "kill", "x", "worker-0"], ["cancel", "x"]])
def test_commands_on_unknown_jobs_fail_cleanly(tmp_path: Path, args: list[str]) -> None:
    r = cli(tmp_path, *args)
    assert r.returncode == 2 and "no perdure state dir" in r.stderr
    Store(tmp_path / "state" / "perdure.db").close()
    r = cli(tmp_path, *args)
    assert r.returncode == 2 and "no job 'x'" in r.stderr


def test_node_commands_check_the_node(tmp_path: Path) -> None:
    r = cli(tmp_path, "node", "drain", "zz")
    assert r.returncode == 2 and "no node 'zz'" in r.stderr
