"""perdure.runtime.compat: each version-dependent path gives what the newest torch's API gives.

The fallback paths run for real where the installed torch needs them (make test-compat runs
this file on every supported torch: all_gather_into_tensor before 2.13, a Metadata without a
version on 2.6); where the installed torch has the newer
API, the fallback is also forced here, so both paths are checked on every version.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

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
