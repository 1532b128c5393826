"""Checkpoints restore onto another world size with the same values (FSDP2 shards, gloo)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ckpt_worker import first_difference, mlp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

from perdure.runtime.checkpoint import Checkpointer


@pytest.mark.skipif(not hasattr(torch.cpu.Stream, "record_event"),
                    reason="this torch's FSDP2 cannot train on CPU (2.6: its CPU stream has no "
                           "record_event); the reshard runs on 2.7 and later")
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # stock DCP's, expected
def test_2_to_4_and_4_to_2_and_4_to_1_restore_the_same_values(
    run_ranks: Callable[..., Any], tmp_path: Path
) -> None:
    d = tmp_path / "ckpt"
    ranks = run_ranks("reshard", 4, {"dir": str(d)}, timeout=240)

    assert ranks[0]["saved_on_2"] > 0 and ranks[1]["saved_on_2"] > 0
    assert all(r["saved_on_4"] > 0 for r in ranks)  # each rank wrote its own shard
    for r in ranks:  # saved on 2 ranks, restored on 4
        assert r["on_4"]["step"] == 3 and r["on_4"]["state_step"] == 3
    assert ranks[0]["on_4"]["diff"] is None
    for r in ranks[:2]:  # saved on 4 ranks, restored on 2
        assert r["on_2"]["step"] == 5 and r["on_2"]["state_step"] == 5
    assert ranks[0]["on_2"]["diff"] is None

    # Saved on 4 ranks, restored on 1 with no process group: a plain model reads the shards.
    model = mlp(seed=1)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    state = {"model": model, "optim": optim, "step": -1}
    ckpt = Checkpointer(d, keep=None)
    assert ckpt.steps() == [3, 5]
    assert ckpt.restore_latest(state) == 5
    got = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optim)}
    expected = torch.load(f"{d}-expected-5.pt", weights_only=True)
    assert first_difference(got, expected) is None
    assert state["step"] == 5

    # A stock DCP load reads the 4-rank checkpoint too.
    plain = mlp(seed=2)
    stock = {"model": get_model_state_dict(plain)}
    dcp_load(stock, checkpoint_id=str(d / "step-00000005"))
    assert first_difference(stock["model"], expected["model"]) is None
