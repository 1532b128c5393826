"""The torchrun baselines' checkpointing (bench/recovery.py's MLP worker and
bench/recovery_gpt.py's GPT worker): a synchronous stock DCP save every N steps into
`step-N/`, a LATEST file naming the newest complete one, and a restart resuming from it.

Imports nothing but torch (inside the functions), so that a restarted baseline worker pays
for torch alone, as under plain torchrun.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def latest(ckpt: Path) -> int:
    """The step LATEST names; 0 when there is none yet."""
    try:
        return int((ckpt / "LATEST").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def restore(model: Any, opt: Any, ckpt: Path) -> int:
    """Load the newest complete checkpoint into `model` and `opt`; the step it holds (0: none)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    step = latest(ckpt)
    if step:
        msd, osd = get_state_dict(model, opt)
        dcp_load({"model": msd, "optim": osd}, checkpoint_id=str(ckpt / f"step-{step}"))
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    return step


def save(model: Any, opt: Any, ckpt: Path, step: int, rank: int) -> None:
    """Save step `step` (every rank), then name it LATEST once all ranks are done."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    msd, osd = get_state_dict(model, opt)
    dcp_save({"model": msd, "optim": osd}, checkpoint_id=str(ckpt / f"step-{step}"))
    dist.barrier()
    if rank == 0:  # a save that a kill cut short is never named LATEST
        (ckpt / "LATEST.tmp").write_text(str(step))
        os.replace(ckpt / "LATEST.tmp", ckpt / "LATEST")
