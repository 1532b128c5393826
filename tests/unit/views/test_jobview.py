"""How a job reads in describe, ls, run and the API (pure helpers)."""

from __future__ import annotations

from perdure.cli.runprogress import progress_text
from perdure.core.goodput import Goodput
from perdure.core.model import Job, JobError
from perdure.core.replica import Replica
from perdure.core.spec import JobSpec
from perdure.core.states import ErrorCode, JobState, ReplicaState
from perdure.views import jobview

SPEC = JobSpec.model_validate({"name": "j", "pools": [{"name": "w", "command": ["x"]}]})


def test_progress_text_reads_as_the_readme_shows_it() -> None:
    g = Goodput(wall=100.0, productive=91.2, last_step=160, total_steps=6000,
                steps_per_second=12.3)
    assert progress_text(g, 160) == "step 160 / 6000 · 12.3 steps/s · ETA 7m54s · goodput 91.2%"
    assert progress_text(Goodput(wall=100.0), None) == "step - · goodput no progress reported"


def test_a_recovered_failure_is_never_the_jobs_error() -> None:
    job = Job("j-1", SPEC, "/w", 0.0, state=JobState.RUNNING,
              error=JobError(ErrorCode.USER_CODE, "Replica w-0 exited 1."))
    d = jobview.errors_json(job)
    assert d["error"] is None and d["last_failure"]["recovered"] is True
    assert jobview.error_line(d) == "Last failure (recovered): USER_CODE: Replica w-0 exited 1."
    job.state = JobState.FAILED
    assert jobview.errors_json(job)["error"] == {"code": "USER_CODE",
                                                 "message": "Replica w-0 exited 1."}


def test_replicas_read_finished_and_signals_by_name() -> None:
    r = Replica("w-1", "w", 1, 1, 1, state=ReplicaState.EXITED, exit_code=0)
    assert jobview.replica_status(r) == "finished"
    r.exit_code = 137
    assert jobview.replica_status(r) == "exited 137 (SIGKILL)"
    r.state, r.exit_code = ReplicaState.WAITING, None
    assert jobview.replica_status(r) == "waiting"
    r.restarts, r.restarts_before = 1, 3
    line = jobview.replica_line(jobview.replica_json(r))
    assert "restarts 1 (4 in all attempts)" in line and "None" not in line


def test_durations_and_steps() -> None:
    assert [jobview.duration(s) for s in (None, 5, 192, 7500)] == ["-", "5s", "3m12s", "2h05m"]
    assert jobview.step_text(160, 6000) == "160 / 6000"
    assert jobview.step_text(160, None) == "160" and jobview.step_text(None, 5) == "-"
