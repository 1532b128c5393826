"""Training scripts with no perdure in them (examples/unmodified), resumed by a spec change
only: a SIGKILLed replica's script goes on from its last checkpoint and ends with the weights
of an uninterrupted run.

- nanoGPT's shape: `resume: {when_exists: out/ckpt.pt, args: [--init_from=resume]}`;
- run_clm's shape (HfArgumentParser, `--resume_from_checkpoint`): `resume:` with {latest}, or
  `integrations: [transformers]`;
- a Lightning `Trainer.fit`: `integrations: [lightning]`.

Each prints its SIGKILL -> next step time (`pytest -s`); measured, never asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.harness import kill_leftovers
from unmodified import Run, direct, in_process, report, same_weights

NANOGPT = ["nanogpt_like.py", "--out_dir=out", "--max_iters=40"]
HF = ["hf_clm.py", "--output_dir", "out", "--max_steps", "20", "--save_steps", "5",
      "--per_device_train_batch_size", "4", "--use_cpu", "true", "--report_to", "none",
      "--disable_tqdm", "true", "--seed", "0"]
LIGHTNING = ["lightning_fit.py", "--out", "out", "--epochs", "3"]


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for run in made:
        kill_leftovers(run.state)


def _run(runs: list[Run], root: Path, argv: list[str], **pool: object) -> Run:
    run = Run(root, argv[0], {"command": ["python", *argv], **pool})
    runs.append(run)
    run.start()
    return run


def test_nanogpt_shape_resumes_with_init_from_resume(runs: list[Run], tmp_path: Path) -> None:
    in_process(tmp_path / "base", NANOGPT[0], NANOGPT[1:])
    run = _run(runs, tmp_path / "job", [*NANOGPT, "--iter_time=0.1"],
               resume={"when_exists": "out/ckpt.pt", "args": ["--init_from=resume"]})
    run.wait_step(23)  # out/ckpt.pt holds iter 20
    run.sigkill()
    run.succeeded()
    assert "resuming from out/ckpt.pt at iter 20" in run.log() or (
        "resuming from out/ckpt.pt at iter 30" in run.log())
    assert same_weights(tmp_path / "base/out/final.pt", tmp_path / "job/out/final.pt")
    events = run.events()
    assert f"worker-0: resume: {tmp_path}/job/out/ckpt.pt matches: appending --init_from=resume" \
        in events
    assert not [e for e in events if "from the beginning" in e]
    report("nanoGPT shape (resume:)", run.kill_to_next_step())


@pytest.fixture(scope="module")
def hf_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("hf-base")
    direct(root, HF[0], HF[1:])
    return root / "out" / "model.safetensors"


@pytest.mark.frameworks_long  # ~60 s here: a third Hugging Face run
def test_run_clm_shape_resumes_from_the_latest_checkpoint(runs: list[Run], tmp_path: Path,
                                                          hf_baseline: Path) -> None:
    run = _run(runs, tmp_path, [*HF, "--step_time", "0.1"],
               resume={"when_exists": "out/checkpoint-*",
                       "args": ["--resume_from_checkpoint", "{latest}"]})
    run.wait_step(12)  # checkpoint-10 is written
    run.sigkill()
    run.succeeded()
    assert same_weights(hf_baseline, tmp_path / "out" / "model.safetensors")
    events = run.events()
    appended = [e for e in events if "matches: appending --resume_from_checkpoint" in e]
    assert appended, events
    assert appended[0].endswith((f"{tmp_path}/out/checkpoint-10",
                                 f"{tmp_path}/out/checkpoint-15")), appended
    hint = [e for e in events if "without perdure's integration" in e]
    assert hint == ["worker-0: worker-0 made a transformers.Trainer without perdure's "
                    "integration: a restart resumes only as the script itself does; add "
                    "`integrations: [transformers]` to pool worker in the spec for resume, "
                    "preemption saves and progress with no code change"]
    report("run_clm shape (resume: {latest})", run.kill_to_next_step())


def test_run_clm_shape_with_the_transformers_integration(runs: list[Run], tmp_path: Path,
                                                         hf_baseline: Path) -> None:
    run = _run(runs, tmp_path, [*HF, "--step_time", "0.1"], integrations=["transformers"])
    run.wait_step(12)
    run.sigkill()
    run.succeeded()
    assert same_weights(hf_baseline, tmp_path / "out" / "model.safetensors")
    d = run.describe()
    assert d["goodput"]["last_step"] == 20, d["goodput"]  # progress reached perdure
    assert not [e for e in run.events() if "without perdure's integration" in e
                or "from the beginning" in e]
    assert "import perdure" not in (tmp_path / HF[0]).read_text()  # the script is unmodified
    assert run.warm()[-1], run.warm()  # the relaunch ran in a warm standby, integrated
    report("run_clm shape (integrations: [transformers])", run.kill_to_next_step())


def test_lightning_fit_with_the_lightning_integration(runs: list[Run], tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    direct(tmp_path / "base", LIGHTNING[0], LIGHTNING[1:])
    run = _run(runs, tmp_path / "job", [*LIGHTNING, "--step_time", "0.1"],
               integrations=["lightning"])
    run.wait_step(13)  # the checkpoint of epoch 0 (step 10) is committed
    run.sigkill()
    run.succeeded()
    assert same_weights(tmp_path / "base/out/final.pt", tmp_path / "job/out/final.pt")
    steps = [n for n, _ in run.steps()]
    resumed_at = steps[steps.index(max(steps[:steps.index(13) + 1])) + 1]
    assert resumed_at in (11, 21), steps  # after step 10 (or 20), not from the beginning
    d = run.describe()
    assert d["goodput"]["last_step"] == 30, d["goodput"]
    report("Lightning fit (integrations: [lightning])", run.kill_to_next_step())


# ---- two processes: the long variants ------------------------------------------------------


@pytest.mark.frameworks_long
def test_run_clm_shape_on_two_replicas_with_the_integration(runs: list[Run],
                                                            tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    base = _run(runs, tmp_path / "base", HF, replicas=2, integrations=["transformers"])
    base.succeeded()
    run = _run(runs, tmp_path / "job", [*HF, "--step_time", "0.1"], replicas=2,
               integrations=["transformers"])
    run.wait_step(12)
    run.sigkill("worker-1")
    run.succeeded()
    assert same_weights(tmp_path / "base/out/model.safetensors",
                        tmp_path / "job/out/model.safetensors")
    report("run_clm shape, 2 replicas (integrations: [transformers])", run.kill_to_next_step())


@pytest.mark.frameworks_long
def test_lightning_fit_on_two_local_ranks_with_the_integration(runs: list[Run],
                                                               tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    argv = [*LIGHTNING, "--devices", "2", "--epochs", "4"]
    base = _run(runs, tmp_path / "base", argv, procs_per_replica=2, integrations=["lightning"])
    base.succeeded()
    run = _run(runs, tmp_path / "job", [*argv, "--step_time", "0.1"], procs_per_replica=2,
               integrations=["lightning"])
    run.wait_step(8)  # 5 steps an epoch on 2 ranks: epoch 0's checkpoint is committed
    run.sigkill()  # local rank 0: its sibling goes with it, the replica restarts
    run.succeeded()
    assert same_weights(tmp_path / "base/out/final.pt", tmp_path / "job/out/final.pt")
    report("Lightning fit, 2 local ranks (integrations: [lightning])", run.kill_to_next_step())
