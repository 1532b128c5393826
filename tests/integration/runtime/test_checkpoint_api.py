"""The Checkpointer as a single-process training script uses it (real files, real threads)."""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from perdure.runtime.checkpoint import (
    Checkpointer,
    CheckpointError,
    CheckpointMismatchError,
    OnBusy,
    RankLocal,
    SavePolicy,
    UnsupportedValueError,
)


def model_and_optim(seed: int, hidden: int = 16) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Dropout(0.1), nn.Linear(hidden, 3))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train_step(model: nn.Module, optim: torch.optim.Optimizer, step: int) -> None:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
    loss = model(x).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path: Path) -> None:
    model, optim = model_and_optim(0)
    ckpt = Checkpointer(tmp_path)
    torch.manual_seed(99)  # dropout draws from torch's global generator
    for step in range(1, 11):
        train_step(model, optim, step)
        if step == 5:
            rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
                   "numpy": np.random.get_state()}
            ckpt.save(step, {"model": model, "optim": optim, "step": step, "rng": rng})
    ckpt.wait()

    fresh, fresh_optim = model_and_optim(1)
    state: dict[str, Any] = {"model": fresh, "optim": fresh_optim, "step": 0, "rng": {}}
    start = Checkpointer(tmp_path).restore_latest(state)
    assert start == 5 and state["step"] == 5
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    for step in range(start + 1, 11):
        train_step(fresh, fresh_optim, step)
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # stock DCP's, expected
def test_stock_dcp_load_reads_a_perdure_checkpoint(tmp_path: Path) -> None:
    model, optim = model_and_optim(0)
    train_step(model, optim, 1)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, {"model": model, "optim": optim, "step": 1})
    ckpt.wait()

    other, other_optim = model_and_optim(1)
    sd: dict[str, Any] = {"model": get_model_state_dict(other),
                          "optim": get_optimizer_state_dict(other, other_optim), "step": 0}
    dcp_load(sd, checkpoint_id=str(tmp_path / "step-00000001"))
    live: dict[str, Any] = dict(get_model_state_dict(model))
    for key, value in live.items():
        assert torch.equal(sd["model"][key], value)
    saved: Any = get_optimizer_state_dict(model, optim)
    exp_avg = saved["state"]["0.weight"]["exp_avg"]
    assert torch.equal(sd["optim"]["state"]["0.weight"]["exp_avg"], exp_avg)
    assert sd["step"] == 1


def test_a_different_model_fails_naming_the_first_mismatched_key_and_shapes(
    tmp_path: Path,
) -> None:
    model, optim = model_and_optim(0, hidden=16)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, {"model": model, "optim": optim}, blocking=True)

    wider, wider_optim = model_and_optim(0, hidden=32)
    with pytest.raises(CheckpointMismatchError, match=r"'model\.0\.weight' has shape \(16, 8\) "
                       r"in the checkpoint but \(32, 8\) in the state"):
        ckpt.restore_latest({"model": wider, "optim": wider_optim})

    deeper = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Dropout(0.1), nn.Linear(16, 3),
                           nn.Linear(3, 3))
    with pytest.raises(CheckpointMismatchError, match=r"'model\.4\.weight' \(shape \(3, 3\)\) is "
                       "in the state but not in the checkpoint"):
        ckpt.restore_latest({"model": deeper})

    with pytest.raises(CheckpointMismatchError, match=r"state key 'ema' is not in checkpoint "
                       r"step-00000001, which holds \['model', 'optim'\]"):
        ckpt.restore_latest({"model": model, "ema": torch.zeros(3)})


def test_process_mode_writes_from_shared_buffers_across_layout_changes(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=None, persist="process")
    writer = ckpt._writer
    assert writer is not None
    ckpt.save(1, {"w": torch.arange(10.0), "note": "one"})
    ckpt.save(2, {"w": torch.arange(20.0), "b": torch.ones(3, dtype=torch.int8)})  # new layout
    ckpt.wait()
    state: dict[str, Any] = {"w": torch.zeros(10), "note": ""}
    assert ckpt.restore(state, 1) == 1
    assert torch.equal(state["w"], torch.arange(10.0)) and state["note"] == "one"
    state = {"w": torch.zeros(20), "b": torch.zeros(3, dtype=torch.int8)}
    assert ckpt.restore_latest(state) == 2
    assert torch.equal(state["w"], torch.arange(20.0)) and torch.equal(state["b"], torch.ones(3))
    ckpt.close()
    assert writer.proc.poll() == 0  # the writer process is gone


def test_restoring_into_another_dtype_casts_through_dcp(tmp_path: Path) -> None:
    model, _ = model_and_optim(0)
    Checkpointer(tmp_path).save(1, {"model": model}, blocking=True)
    half, _ = model_and_optim(1)
    half = half.to(torch.bfloat16)
    Checkpointer(tmp_path).restore_latest({"model": half})
    for a, b in zip(model.state_dict().values(), half.state_dict().values(), strict=True):
        assert b.dtype == torch.bfloat16 and torch.equal(a.to(torch.bfloat16), b)


def test_a_failed_background_save_raises_at_wait_once_and_keeps_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the checkpointer needs a directory")
    reported = Checkpointer(blocker)  # the default: reported, training goes on
    assert reported.save(1, {"w": torch.ones(3)}) is True
    reported.wait()
    assert reported.failures.consecutive == 1 and "save of step 1" in str(
        reported.failures.last_error)
    with pytest.raises(CheckpointError, match="save of step 2"):
        reported.save(2, {"w": torch.ones(3)}, blocking=True)  # asked to wait: raised
    ckpt = Checkpointer(blocker, on_failure="raise")
    assert ckpt.save(1, {"w": torch.ones(3)}) is True
    with pytest.raises(CheckpointError, match=r"save of step 1 to .* failed: rank 0: "):
        ckpt.wait()
    ckpt.wait()  # raised once, not again

    ckpt.save(2, {"w": torch.ones(3)})
    with pytest.raises(CheckpointError, match="save of step 2"):
        ckpt.save(3, {"w": torch.ones(3)})  # the next save raises the pending error


def test_values_that_would_need_pickle_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    ckpt = Checkpointer(tmp_path)
    with pytest.raises(UnsupportedValueError, match=r"'loader\.fn' has type builtins.function"):
        ckpt.save(1, {"loader": {"fn": lambda x: x}})
    assert ckpt.steps() == [] and list(tmp_path.iterdir()) == []


def test_on_busy_skip_skips_while_a_save_is_persisting(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, policy=SavePolicy(on_busy=OnBusy.SKIP))
    big = {"w": torch.randn(32 * 1024 * 1024 // 4)}  # 32 MiB: written and fsynced for a while
    assert ckpt.save(1, big) is True
    assert ckpt.save(2, big) is False
    ckpt.wait()
    assert ckpt.save(3, big) is True
    ckpt.wait()
    assert ckpt.steps() == [1, 3]


def test_blocking_save_is_committed_when_it_returns(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, async_save=False)
    ckpt.save(4, {"w": torch.ones(2)})
    assert ckpt.steps() == [4]
    assert ckpt.last_save is not None and ckpt.last_save.name == "step-00000004"


def test_maybe_save_follows_the_policy(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path, keep=None, policy=SavePolicy(every_steps=3))
    saved = [s for s in range(1, 10) if ckpt.maybe_save(s, {"w": torch.full((2,), s)})]
    ckpt.wait()
    assert saved == [3, 6, 9] and ckpt.steps() == [3, 6, 9]


def test_an_optimizer_that_never_stepped_is_saved_without_being_changed(tmp_path: Path) -> None:
    model, optim = model_and_optim(0)
    ckpt = Checkpointer(tmp_path)
    ckpt.save(0, {"model": model, "optim": optim}, blocking=True)
    assert not optim.state  # saving did not initialise it (a zero step would shift Adam)

    trained, trained_optim = model_and_optim(1)
    train_step(trained, trained_optim, 1)
    trained_optim.param_groups[0]["lr"] = 0.5
    assert ckpt.restore_latest({"model": trained, "optim": trained_optim}) == 0
    assert not trained_optim.state and trained_optim.param_groups[0]["lr"] == 1e-2


def test_rank_local_values_restore_into_their_wrapper(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, {"rng": RankLocal({"seed": 7, "state": torch.arange(4)})}, blocking=True)
    assert (tmp_path / "step-00000001").exists()
    back = RankLocal(None)
    ckpt.restore_latest({"rng": back})
    assert back.value["seed"] == 7 and torch.equal(back.value["state"], torch.arange(4))


def test_restore_never_unpickles_the_checkpoint(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, {"w": torch.arange(3.0), "note": "hello"}, blocking=True)
    directory = tmp_path / "step-00000001"
    canary = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {canary}",))

    # A hostile .metadata (stock DCP would unpickle it); keep the commit marker consistent.
    payload = pickle.dumps(Exploit())
    (directory / ".metadata").write_bytes(payload)
    marker = json.loads((directory / "COMMITTED").read_text())
    marker["files"][".metadata"] = len(payload)
    (directory / "COMMITTED").write_text(json.dumps(marker))

    state: dict[str, Any] = {"w": torch.zeros(3), "note": ""}
    assert ckpt.restore_latest(state) == 1
    assert torch.equal(state["w"], torch.arange(3.0)) and state["note"] == "hello"
    assert not canary.exists()

    # A hostile plain value is refused by weights_only loading, not executed.
    from perdure.runtime.checkpoint.reader import SafeLoadPlanner

    hostile = io.BytesIO()
    torch.save(Exploit(), hostile)
    hostile.seek(0)

    index = MetadataIndex("note")
    item = ReadItem(LoadItemType.BYTE_IO, index, torch.Size([0]), index, torch.Size([0]),
                    torch.Size([0]))
    with pytest.raises(pickle.UnpicklingError):
        SafeLoadPlanner().load_bytes(item, hostile)
    assert not canary.exists()


def _persist_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "perdure-checkpoint-persist"}


def test_saves_reuse_one_persist_thread_and_close_ends_it(tmp_path: Path) -> None:
    before = _persist_threads()  # other tests' checkpointers may not be collected yet
    ckpt = Checkpointer(tmp_path, keep=2)
    seen = []
    for step in range(1, 4):
        ckpt.save(step, {"w": torch.full((4,), step)})
        ckpt.wait()
        seen.append(_persist_threads() - before)
    assert len(seen[0]) == 1 and seen[0] == seen[1] == seen[2]  # one thread, kept
    assert ckpt.steps() == [2, 3]
    ckpt.close()
    (thread,) = seen[0]
    assert not thread.is_alive()


def test_a_checkpointer_dropped_without_close_ends_its_persist_thread(tmp_path: Path) -> None:
    before = _persist_threads()
    ckpt = Checkpointer(tmp_path)
    ckpt.save(1, {"w": torch.ones(2)})
    ckpt.wait()
    (thread,) = _persist_threads() - before
    del ckpt
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_save_in_flight_at_exit_is_committed(tmp_path: Path) -> None:
    # The stage and persist threads are daemons: the interpreter's exit must still finish the
    # save, deferred copies (the stager) and then the write (its persist worker).
    script = (
        "import sys, torch\n"
        "from perdure.runtime.checkpoint import Checkpointer\n"
        "model = torch.nn.Linear(256, 1024)\n"  # 1 MiB of parameters, 3 with Adam's state
        "optim = torch.optim.Adam(model.parameters())\n"
        "model(torch.ones(1, 256)).sum().backward()\n"
        "optim.step()\n"
        "ckpt = Checkpointer(sys.argv[1])\n"
        "ckpt.save(7, {'model': model, 'optim': optim, 'w': torch.arange(1 << 20)})\n"
        "print('returned', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0 and "returned" in done.stdout, done.stderr
    assert Checkpointer(tmp_path).steps() == [7]
