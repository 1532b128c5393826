"""Silent corruption is caught: checksums recorded at commit, verified on restore, and a restore
that falls back to the previous checkpoint when the newest cannot be loaded (real files)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from perdure.runtime.checkpoint import Checkpointer, CheckpointError
from perdure.runtime.checkpoint import checksum as crc


def model_and_optim(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(model: nn.Module, optim: torch.optim.Optimizer) -> None:
    loss = model(torch.randn(4, 64)).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()


def two_saves(directory: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Save steps 1 and 2; return the model's weights at each."""
    model, optim = model_and_optim(0)
    ckpt = Checkpointer(directory, keep=None)
    weights = []
    for step in (1, 2):
        train_step(model, optim)
        ckpt.save(step, {"model": model, "optim": optim, "step": step}, blocking=True)
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    ckpt.close()
    return weights[0], weights[1]


def restore_fresh(directory: Path) -> tuple[Checkpointer, int | None, dict[str, Any]]:
    model, optim = model_and_optim(1)
    state: dict[str, Any] = {"model": model, "optim": optim, "step": -1}
    ckpt = Checkpointer(directory)
    return ckpt, ckpt.restore_latest(state), state


def shard(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}" / "__0_0.distcp"


def flip_middle(path: Path, n: int) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + n] = bytes(b ^ 0xFF for b in data[mid : mid + n])
    path.write_bytes(bytes(data))


def assert_weights(state: dict[str, Any], expected: dict[str, torch.Tensor]) -> None:
    for key, value in state["model"].state_dict().items():
        assert torch.equal(value, expected[key]), key


def test_flipped_bytes_in_a_shard_fall_back_to_the_previous_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    at_1, _ = two_saves(tmp_path)
    size = shard(tmp_path, 2).stat().st_size
    flip_middle(shard(tmp_path, 2), 2000)
    assert shard(tmp_path, 2).stat().st_size == size

    with caplog.at_level(logging.WARNING, "perdure.checkpoint"):
        ckpt, step, state = restore_fresh(tmp_path)
    assert step == 1 and state["step"] == 1
    assert_weights(state, at_1)
    [failure] = ckpt.restore_failures
    assert failure.startswith("step-00000002: ") and "is corrupt" in failure
    assert "__0_0.distcp" in failure and "crc32" in failure
    assert "step-00000002 cannot be restored" in caplog.text and "falling back" in caplog.text


def test_a_zero_filled_shard_falls_back_and_never_advises_unsafe_loading(tmp_path: Path) -> None:
    at_1, _ = two_saves(tmp_path)
    path = shard(tmp_path, 2)
    path.write_bytes(bytes(path.stat().st_size))

    _, step, state = restore_fresh(tmp_path)
    assert step == 1
    assert_weights(state, at_1)

    # Asked for exactly that step, the error says what is wrong, in one line, safely.
    model, optim = model_and_optim(2)
    with pytest.raises(CheckpointError) as info:
        Checkpointer(tmp_path).restore({"model": model, "optim": optim, "step": 0}, 2)
    text = str(info.value)
    assert "step-00000002/__0_0.distcp" in text and "is corrupt" in text
    assert "weights_only" not in text and "Traceback" not in text and "\n" not in text


def test_a_garbled_metadata_file_of_the_same_size_falls_back(tmp_path: Path) -> None:
    at_1, _ = two_saves(tmp_path)
    meta = tmp_path / "step-00000002" / "perdure.json"
    raw = meta.read_bytes()
    meta.write_bytes(raw[:10] + b"#" * 40 + raw[50:])  # still the same size

    ckpt, step, state = restore_fresh(tmp_path)
    assert step == 1
    assert_weights(state, at_1)
    assert "perdure.json is corrupt" in ckpt.restore_failures[0]


def test_metadata_that_still_parses_but_points_elsewhere_is_caught(tmp_path: Path) -> None:
    """A change that keeps perdure.json valid JSON is caught by its checksum in the marker."""
    at_1, _ = two_saves(tmp_path)
    meta = tmp_path / "step-00000002" / "perdure.json"
    doc = json.loads(meta.read_bytes())
    doc["storage"][0]["start"], doc["storage"][1]["start"] = (doc["storage"][1]["start"],
                                                              doc["storage"][0]["start"])
    meta.write_text(json.dumps(doc))
    _, step, state = restore_fresh(tmp_path)
    assert step == 1
    assert_weights(state, at_1)


def test_every_checkpoint_corrupt_raises_naming_each(tmp_path: Path) -> None:
    two_saves(tmp_path)
    for step in (1, 2):
        flip_middle(shard(tmp_path, step), 64)
    model, optim = model_and_optim(1)
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* could be restored \(newest "
                       r"first\): step-00000002: .*is corrupt.*; step-00000001: .*is corrupt"):
        Checkpointer(tmp_path).restore_latest({"model": model, "optim": optim, "step": 0})


def test_a_corrupt_plain_value_is_caught_too(tmp_path: Path) -> None:
    """Plain values take DCP's read path (torch.load of the item): verified as well."""
    ckpt = Checkpointer(tmp_path, keep=None)
    for step in (1, 2):
        ckpt.save(step, {"note": "x" * 5000 + str(step)}, blocking=True)
    path = shard(tmp_path, 2)
    data = bytearray(path.read_bytes())
    at = data.index(b"xxxx") + 100
    data[at] = ord("y")
    path.write_bytes(bytes(data))
    state: dict[str, Any] = {"note": None}
    assert Checkpointer(tmp_path).restore_latest(state) == 1
    assert state["note"] == "x" * 5000 + "1"


def test_the_commit_records_a_checksum_of_every_file(tmp_path: Path) -> None:
    two_saves(tmp_path)
    directory = tmp_path / "step-00000002"
    marker = json.loads((directory / "COMMITTED").read_bytes())
    assert marker["checksum"] == crc.ALGORITHM == "crc32c"
    assert set(marker["checksums"]) == set(marker["files"])
    for file, recorded in marker["checksums"].items():
        assert crc.text(crc.update(crc.ALGORITHM, 0, (directory / file).read_bytes())) == recorded


@pytest.mark.parametrize("algorithm", [crc.CRC32C, crc.CRC32])
def test_checksums_combine_like_the_concatenation(algorithm: str) -> None:
    pieces = [b"", b"a", bytes(range(256)) * 41, b"perdure" * 1000]
    for a in pieces:
        for b in pieces:
            whole = crc.update(algorithm, 0, a + b)
            assert crc.combine(algorithm, crc.update(algorithm, 0, a),
                               crc.update(algorithm, 0, b), len(b)) == whole
    assert crc.update(crc.CRC32, 0, b"123456789") == 0xCBF43926  # the standard check values
    assert crc.update(crc.CRC32C, 0, b"123456789") == 0xE3069283


def test_two_ranks_different_urls_are_named_and_a_one_rank_corruption_falls_back_on_both(
    run_ranks: Any, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    results = run_ranks("integrity", 2, {"dir": str(ckpt)})
    for rank, r in enumerate(results):
        error = r["url_error"]
        assert error.startswith("CheckpointError: the ranks were given different checkpoint URLs")
        assert f"rank(s) [0]: {ckpt}-rank-0" in error and f"rank(s) [1]: {ckpt}-rank-1" in error
        # Rank 1's own value in step 2 was corrupt: both ranks restored step 1, each its own.
        assert (r["restored"], r["step"], r["mine"]) == (1, 1, f"{rank}/1")
        # Rank 1 could not write its shard: the save failed on both ranks with rank 1's
        # reason (the error texts travel when a rank fails), and only the next save committed.
        assert r["full_error"].startswith("CheckpointStorageError: save of step 1"), r
        assert "rank 1: OSError" in r["full_error"] and "File too large" in r["full_error"]
        assert (r["failed_steps"], r["later_steps"]) == ([], [2])
        # A lone layout change (step 5) is planned again by every rank and saved; a lone
        # preparation failure (step 8) fails that save on every rank, and the next one saves.
        assert r["layout_steps"] == [1, 2, 3, 4, 5, 6, 7, 9], r
        went = r["layout_went"]
        assert [went[str(s)] for s in (1, 2, 3, 4, 5, 6, 7, 9)] == [True] * 8
        if rank == 1:
            assert went["8"].startswith("UnsupportedValueError"), went
        else:
            assert went["8"].startswith("CheckpointError: save of step 8 abandoned: rank(s) [1]")
    assert not list(tmp_path.glob("ckpt-rank-*/step-*"))  # nothing was written


def test_without_crc32c_checkpoints_use_zlib_crc32_and_are_still_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crc, "ALGORITHM", crc.CRC32)  # as when the crc32c package is missing
    at_1, _ = two_saves(tmp_path)
    marker = json.loads((tmp_path / "step-00000002" / "COMMITTED").read_bytes())
    assert marker["checksum"] == "crc32"
    flip_middle(shard(tmp_path, 2), 16)
    ckpt, step, state = restore_fresh(tmp_path)
    assert step == 1
    assert_weights(state, at_1)
    assert "its crc32 is" in ckpt.restore_failures[0]


def test_a_checkpoint_saved_before_checksums_still_restores_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, at_2 = two_saves(tmp_path)
    directory = tmp_path / "step-00000002"
    doc = json.loads((directory / "perdure.json").read_bytes())
    del doc["checksum"]
    for entry in doc["storage"]:
        del entry["crc"]
    (directory / "perdure.json").write_text(json.dumps(doc))
    marker = json.loads((directory / "COMMITTED").read_bytes())
    del marker["checksum"], marker["checksums"]
    marker["files"]["perdure.json"] = (directory / "perdure.json").stat().st_size
    (directory / "COMMITTED").write_text(json.dumps(marker))

    with caplog.at_level(logging.WARNING, "perdure.checkpoint"):
        _, step, state = restore_fresh(tmp_path)
    assert step == 2
    assert_weights(state, at_2)
    assert "step-00000002 was saved before perdure recorded checksums" in caplog.text
