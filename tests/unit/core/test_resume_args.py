"""`resume:` and what else says a script resumes: the launch's request, the group's key, the
newest match, and the event of a relaunch that starts over (pure; the fake backend)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers.sim import Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.events import Launch
from perdure.core.launchenv import LaunchSettings, build_launch
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.resume import appended, newest
from perdure.core.spec import JobSpec, parse_job_spec
from perdure.core.specread import SpecError
from perdure.core.states import JobState

NANOGPT = {"when_exists": "out/ckpt.pt", "args": ["--init_from=resume"]}
RUN_CLM = {"when_exists": "out/checkpoint-*", "args": ["--resume_from_checkpoint", "{latest}"]}


def _spec(replicas: int = 2, **pool: Any) -> JobSpec:
    return spec(pools=[{"name": "worker", "replicas": replicas, "command": ["python", "t.py"],
                        **pool}])


def _launches(sim: Sim) -> list[Launch]:
    return [p.launch for p in sim.backend.procs.values()]


def test_the_first_launch_asks_nothing_and_every_relaunch_of_a_group_shares_one_key() -> None:
    kill_at = {"worker-1.1": 1.0}
    sim = Sim(script=lambda launch: FakeRun(seconds=kill_at.get(
        launch.launch_id.split(".", 2)[2]), exit_code=137, signal=9))
    job_id = sim.submit(_spec(resume=NANOGPT))
    sim.run_until(job_id, {JobState.RUNNING})
    first = {x.replica: x for x in _launches(sim)}
    assert all(x.resume is None for x in first.values())
    for _ in range(40):
        sim.step()
    again = [x for x in _launches(sim) if x.launch_id.endswith(".2")]
    assert sorted(x.replica for x in again) == ["worker-0", "worker-1"]  # a group restart
    requests = {x.resume for x in again}
    assert len(requests) == 1  # the same request, key and all, for every rank
    (request,) = requests
    assert request is not None and request.glob == "/work/out/ckpt.pt"
    assert request.args == ("--init_from=resume",)
    env = {x.replica: x.env for x in again}
    assert env["worker-0"]["TORCHELASTIC_RESTART_COUNT"] == env["worker-1"][
        "TORCHELASTIC_RESTART_COUNT"] == "1"
    assert (env["worker-0"]["PERDURE_RESTART_COUNT"],
            env["worker-1"]["PERDURE_RESTART_COUNT"]) == ("0", "1")


def test_a_replica_relaunched_alone_gets_a_key_of_its_own() -> None:
    s = spec(pools=[{"name": "worker", "replicas": 2, "command": ["python", "t.py"],
                     "resume": RUN_CLM}], restart={"scope": "replica"})
    job = Job("j-1", s, "/spec", 0.0, replicas=make_replicas(s))
    settings = LaunchSettings(state_dir="/st", python="/py")
    keys = set()
    for r in job.replicas:
        r.launches = 2
        request = build_launch(job, r, settings).resume
        assert request is not None and request.glob == "/spec/out/checkpoint-*"
        keys.add(request.key)
    assert len(keys) == 2


def test_newest_is_the_highest_number_then_the_latest_mtime() -> None:
    assert newest([("/o/checkpoint-900", 5.0), ("/o/checkpoint-1200", 1.0)]) == (
        "/o/checkpoint-1200")
    assert newest([("/o/ckpt-a.pt", 1.0), ("/o/ckpt-b.pt", 2.0)]) == "/o/ckpt-b.pt"
    assert appended(["--resume_from_checkpoint", "{latest}"],
                    [("/o/checkpoint-10", 1.0), ("/o/checkpoint-20", 0.5)]) == (
        "--resume_from_checkpoint", "/o/checkpoint-20")
    assert appended(["--init_from=resume"], []) == ()


def test_a_relaunch_with_nothing_that_says_it_resumes_is_an_event() -> None:
    sim = Sim(script=lambda launch: FakeRun(
        seconds=30.0 if launch.launch_id.endswith(".1") else None, exit_code=1))
    job_id = sim.submit(_spec(replicas=1))
    sim.run_until(job_id, {JobState.RUNNING})
    for _ in range(320):
        sim.step()
    lost = [m for m in sim.messages(job_id) if "from the beginning" in m]
    assert lost == ["worker-0 restarts from the beginning: nothing tells perdure this script "
                    "resumes; ~30 s of work since its start is lost (add `resume:` or use "
                    "perdure's Checkpointer)"]


@pytest.mark.parametrize("pool", [{"resume": NANOGPT}, {"integrations": ["transformers"]}])
def test_a_relaunch_that_resumes_is_no_lost_work(pool: dict[str, Any]) -> None:
    sim = Sim(script=lambda launch: FakeRun(
        seconds=3.0 if launch.launch_id.endswith(".1") else None, exit_code=1))
    job_id = sim.submit(_spec(replicas=1, **pool))
    sim.run_until(job_id, {JobState.RUNNING})
    for _ in range(60):
        sim.step()
    assert any("restart worker-0 exited 1" in m for m in sim.messages(job_id))
    assert not [m for m in sim.messages(job_id) if "from the beginning" in m]


def test_integrations_reach_the_replica() -> None:
    s = _spec(replicas=1, integrations=["transformers", "lightning"])
    job = Job("j-1", s, "/spec", 0.0, replicas=make_replicas(s))
    env = build_launch(job, job.replicas[0], LaunchSettings(state_dir="/st", python="/py")).env
    assert env["PERDURE_INTEGRATIONS"] == "transformers,lightning"


@pytest.mark.parametrize(("resume", "says"), [
    ('{when_exists: "", args: [a]}', "resume.when_exists: is empty"),
    ("{when_exists: x, args: []}", "resume.args: is empty"),
    ('{when_exists: "out/ckpt[", args: [a]}', "a '[' without its ']'"),
    ('{when_exists: "s3://b/ckpt.pt", args: [a]}', "not a URL"),
    ('{when_exists: x, args: "--init_from=resume"}', "a list of arguments, not a string"),
    ('{when_exists: x, args: ["{latst}"]}', "unknown placeholder {latst}"),
    ("{when_exists: x, args: [a], every: 2}", "resume.every: unknown field"),
])
def test_a_bad_resume_is_one_line_naming_the_field(resume: str, says: str) -> None:
    text = f"name: j\npools: [{{name: w, command: [python, t.py], resume: {resume}}}]\n"
    with pytest.raises(SpecError) as err:
        parse_job_spec(text)
    lines = str(err.value).splitlines()
    assert says in lines[1] and lines[1].startswith("  pools.0.resume"), lines


def test_latest_with_a_glob_without_wildcards_is_allowed() -> None:
    text = ("name: j\npools: [{name: w, command: [python, t.py], "
            "resume: {when_exists: out/ckpt.pt, args: ['--from={latest}']}}]\n")
    assert parse_job_spec(text).pools[0].resume is not None


def test_integrations_name_known_frameworks_once() -> None:
    for bad, says in (("[keras]", "'transformers' or 'lightning'"),
                      ("[lightning, lightning]", "names a framework twice")):
        with pytest.raises(SpecError, match=says):
            parse_job_spec(f"name: j\npools: [{{name: w, command: [python, t.py], "
                           f"integrations: {bad}}}]\n")
