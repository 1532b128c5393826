"""Tiering and storage back ends: a local path, a staged local path, fsspec memory:// and local://."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import torch
from torch import nn

from perdure.runtime.checkpoint import Checkpointer


def _state(seed: int) -> dict[str, object]:
    torch.manual_seed(seed)
    model = nn.Linear(64, 64)
    return {"model": model, "w": torch.randn(1000), "step": seed, "meta": {"seed": seed}}


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    ma, mb = a["model"], b["model"]
    assert isinstance(ma, nn.Module) and isinstance(mb, nn.Module)
    return (
        all(torch.equal(x, y) for x, y in zip(ma.state_dict().values(),
                                               mb.state_dict().values(), strict=True))
        and torch.equal(a["w"], b["w"])  # type: ignore[arg-type]
        and a["step"] == b["step"]
        and a["meta"] == b["meta"]
    )


def test_memory_fsspec_target_is_staged_locally_then_uploaded(tmp_path: Path) -> None:
    url = f"memory://ckpt-{uuid.uuid4().hex}"
    staging = tmp_path / "staging"
    ckpt = Checkpointer(url, keep=2, staging_dir=staging)
    for step in (1, 2, 3):
        ckpt.save(step, _state(step))
    ckpt.wait()
    assert ckpt.steps() == [2, 3]
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    assert fs.exists(f"{root}/step-00000003/COMMITTED")
    assert fs.exists(f"{root}/step-00000003/__0_0.distcp")
    assert not list(staging.rglob("*.distcp"))  # the local copy is gone once uploaded

    # A crashed save on an object store: files without a commit marker.
    fs.pipe_file(f"{root}/step-00000009/__0_0.distcp", b"half a shard")
    back = _state(0)
    assert ckpt.restore_latest(back) == 3
    assert _same(back, _state(3))
    assert ckpt.skipped_partial == [
        "skipped partial checkpoint step-00000009: no commit marker"
    ]
    ckpt.save(4, _state(4))
    ckpt.wait()
    assert not fs.exists(f"{root}/step-00000009")  # retention removed the leftover
    assert ckpt.steps() == [3, 4]


def test_local_target_with_a_staging_directory(tmp_path: Path) -> None:
    ckpt = Checkpointer(tmp_path / "remote", staging_dir=tmp_path / "stage")
    ckpt.save(7, _state(7))
    ckpt.wait()
    assert (tmp_path / "remote" / "step-00000007" / "COMMITTED").exists()
    assert not list((tmp_path / "stage").rglob("*.distcp"))
    back = _state(0)
    assert Checkpointer(tmp_path / "remote").restore_latest(back) == 7
    assert _same(back, _state(7))


def test_fsspec_local_files_without_rename_overwrite_a_step_in_place(tmp_path: Path) -> None:
    ckpt = Checkpointer(f"local://{tmp_path}/ckpt", staging_dir=tmp_path / "stage")
    assert not ckpt.storage.atomic_rename
    ckpt.save(5, _state(5))
    ckpt.save(5, _state(6) | {"step": 5})  # the same step again: the marker decides
    ckpt.wait()
    back = _state(0)
    assert ckpt.restore_latest(back) == 5
    assert _same(back, _state(6) | {"step": 5})
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-00000005"]
