"""perdure.runtime.compat: each version-dependent path gives what the newest torch's API gives.

The fallback paths run for real where the installed torch needs them (make test-compat runs
this file on every supported torch: all_gather_into_tensor before 2.13, the unaligned zip
writer and a Metadata without a version on 2.6); where the installed torch has the newer
API, the fallback is also forced here, so both paths are checked on every version.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from perdure.runtime import compat

ROOT = Path(__file__).resolve().parents[3]


def test_all_gather_single_gathers_on_every_version(tmp_path: Path) -> None:
    """Two real gloo ranks gather through whichever call this torch has."""
    script = (
        "import sys, torch, torch.distributed as dist\n"
        "from perdure.runtime import compat, exitguard\n"
        # (as perdure.init does: an async work's last release can otherwise hang
        # destroy_process_group; seen at 2.6 on a loaded machine)
        "exitguard.install()\n"
        "rank = int(sys.argv[1])\n"
        f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=rank,"
        " world_size=2)\n"
        "out = torch.zeros(4, dtype=torch.int64)\n"
        "compat.all_gather_single(out, torch.tensor([rank, 10 + rank]))\n"
        "work = compat.all_gather_single(out, torch.tensor([rank, 20 + rank]), async_op=True)\n"
        "work.wait()\n"
        "print(out.tolist())\n"
        "dist.destroy_process_group()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], env=env,
                              stdout=subprocess.PIPE, text=True) for r in range(2)]
    # (the last line: some versions' gloo prints its connections to stdout first)
    outs = [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == ["[0, 20, 1, 21]"] * 2
    expected = dist.all_gather_single if hasattr(dist, "all_gather_single") else (
        dist.all_gather_into_tensor)
    assert compat.all_gather_single is expected


@pytest.mark.parametrize("value", [torch.arange(6, dtype=torch.float64).reshape(2, 3),
                                   torch.zeros(0, dtype=torch.int8), 7, {"lr": 0.1}])
def test_save_without_crc_loads_back_on_this_torch(value: object) -> None:
    out = io.BytesIO()
    compat.save_without_crc(value, out)
    back = torch.load(io.BytesIO(out.getvalue()), weights_only=True)
    if isinstance(value, torch.Tensor):
        assert torch.equal(back, value) and back.dtype == value.dtype
    else:
        assert back == value


def test_save_without_crc_takes_the_writer_this_torch_has() -> None:
    """2.7 on: the writer takes the alignment; 2.6: it does not; the path says which."""
    aligned = hasattr(torch.serialization, "_get_storage_alignment")
    assert compat.save_path() == ("aligned" if aligned else "unaligned")
    assert compat.storage_alignment() == (
        torch.serialization._get_storage_alignment() if aligned else 64)


def test_save_falls_back_to_torch_save_when_the_private_writer_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(stream: object) -> None:
        raise AttributeError("module 'torch._C' has no attribute 'PyTorchFileWriter'")

    monkeypatch.setattr(compat, "_writer_with_alignment", gone)
    monkeypatch.setattr(compat, "_writer_without_alignment", gone)
    save = compat._detect_save()
    assert save is compat._plain_save
    out = io.BytesIO()
    save(torch.ones(3), out)
    assert torch.equal(torch.load(io.BytesIO(out.getvalue()), weights_only=True), torch.ones(3))


def test_an_archive_without_crc_is_what_torch_save_writes_but_the_crc() -> None:
    """The same records as torch.save's archive (so any torch reads it), bar the checksums."""
    tensor = torch.arange(100, dtype=torch.float32)
    ours, theirs = io.BytesIO(), io.BytesIO()
    compat.save_without_crc(tensor, ours)
    torch.save(tensor, theirs)
    assert len(ours.getvalue()) == len(theirs.getvalue())
    assert torch.equal(torch.load(io.BytesIO(ours.getvalue()), weights_only=True), tensor)


def test_versioned_metadata_has_a_version_only_where_dcp_has_the_field() -> None:
    from torch.distributed.checkpoint.metadata import Metadata

    md = compat.versioned(Metadata(state_dict_metadata={}))
    if "version" in {f.name for f in __import__("dataclasses").fields(Metadata)}:
        assert md.version == "1.0.0"  # type: ignore[attr-defined]
    else:
        assert md == Metadata(state_dict_metadata={})


@pytest.mark.parametrize(("offsets", "lengths"), [((0, 0), (4, 6)), ((1, 2), (2, 3)),
                                                  ((3, 0), (1, 6))])
def test_narrow_cuts_like_dcps_own_helper(offsets: tuple[int, int],
                                          lengths: tuple[int, int]) -> None:
    tensor = torch.arange(24).reshape(4, 6)
    expected = tensor[offsets[0]:offsets[0] + lengths[0], offsets[1]:offsets[1] + lengths[1]]
    assert torch.equal(compat.narrow(tensor, offsets, lengths), expected)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        self.head = nn.Linear(4, 2)


def _wrapped() -> list[nn.Module]:
    net = _Net()
    compiled = torch.compile(_Net())
    inner = _Net()
    inner.body = torch.compile(inner.body)  # type: ignore[assignment]
    return [net, compiled, inner]


@pytest.mark.parametrize("model", _wrapped(), ids=["plain", "compiled", "compiled-part"])
def test_fqn_names_keys_as_torchs_state_dicts_do_on_both_paths(
        model: nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = list(get_model_state_dict(model))
    assert sorted(compat.fqn(model, k) for k in model.state_dict()) == sorted(expected)
    monkeypatch.setattr(compat, "_fqns", lambda: None)  # a torch without _get_fqns
    assert sorted(compat.fqn(model, k) for k in model.state_dict()) == sorted(expected)


def test_foreach_copy_copies_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [torch.arange(3.0), torch.ones(2, 2)]
    targets = [torch.zeros(3), torch.zeros(2, 2)]
    compat.foreach_copy(targets, sources)
    assert all(torch.equal(t, s) for t, s in zip(targets, sources, strict=True))
    monkeypatch.delattr(torch, "_foreach_copy_")
    targets = [torch.zeros(3), torch.zeros(2, 2)]
    compat.foreach_copy(targets, sources)
    assert all(torch.equal(t, s) for t, s in zip(targets, sources, strict=True))


def test_host_register_says_no_without_cuda() -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: tests/integration/gpu covers pinning")
    assert compat.host_register(0, 4096) is False
    compat.host_unregister(0)  # nothing to undo, nothing raised


def test_rendezvous_handlers_hold_torchs_env_handler() -> None:
    handlers = compat.rendezvous_handlers()
    assert handlers is not None and callable(handlers["env"])


def test_preload_skips_what_this_torch_lacks_or_cannot_import() -> None:
    skipped = compat.preload(("torch", "torch._no_such_module", "json"))
    assert skipped == ["torch._no_such_module"]
    assert set(compat.preload(compat.WARM_IMPORTS)) <= {"torch._dynamo"}


def test_fsdp2_on_cpu_is_told_by_what_the_cpu_stream_can_do() -> None:
    assert compat.fsdp2_trains_on_cpu() == hasattr(torch.cpu.current_stream(), "record_event")
