"""The node's own checks: CPU, memory, disks, and each GPU when CUDA is present.

Side effects: allocates memory, multiplies matrices, writes and removes a small file in each
directory checked. Each check returns a `Result`; nothing here prints or exits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


@dataclass(frozen=True)
class Result:
    """One check's outcome, as its line says it: `PASS cpu: ...` / `FAIL disk checkpoint: ...`."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.name}: {self.detail}"


@dataclass(frozen=True)
class Floors:
    """The least each check accepts (the command's options)."""

    cpu_gflops: float
    memory_mb: int
    free_gb: float
    gpu_tflops: float
    gpu_memory_mb: int


def _matmul_rate(size: int, seconds: float, device: str = "cpu",
                 dtype: Any = None) -> float:
    """FLOP/s of `size`x`size` matmuls run for about `seconds`."""
    import torch

    kind = dtype or torch.float32
    a = torch.randn(size, size, device=device, dtype=kind)
    b = torch.randn(size, size, device=device, dtype=kind)
    (a @ b).sum().item()  # warm up (and, on a GPU, a first sync)
    runs, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        c = a @ b
        runs += 1
    c.sum().item()  # waits for a GPU's queue
    took = time.perf_counter() - began
    if not bool(torch.isfinite(c).all()):
        return -1.0  # wrong numbers: a broken unit, however fast
    return 2.0 * size**3 * runs / took


def cpu(floors: Floors) -> Result:
    """One core's matmul rate: a sick core or a throttled package shows under the floor (all
    cores at once would measure how busy the machine is)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rate = _matmul_rate(256, 0.2) / 1e9
    finally:
        torch.set_num_threads(threads)
    if rate < 0:
        return Result("cpu", False, "matmul gave non-finite numbers")
    return Result("cpu", rate >= floors.cpu_gflops,
                  f"matmul 256x256 at {rate:.1f} GFLOP/s (floor {floors.cpu_gflops:g})")


def memory(floors: Floors) -> Result:
    """MemAvailable of /proc/meminfo: what can be had without swapping."""
    have = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                have = int(line.split()[1]) // 1024
    return Result("memory", have >= floors.memory_mb,
                  f"{have} MiB available (floor {floors.memory_mb})")


def _existing(path: Path) -> Path:
    """`path`, or its nearest existing parent (a checkpoint dir the first save makes)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk(name: str, path: Path, floors: Floors) -> Result:
    """The directory (or the parent it will be made in) is writable, synced, and has room."""
    where = _existing(path)
    try:
        with tempfile.NamedTemporaryFile(dir=where, prefix=".perdure-health-") as f:
            f.write(os.urandom(MIB))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return Result(f"disk {name}", False, f"{path}: not writable: {exc.strerror or exc}")
    free = shutil.disk_usage(where).free / 1024**3
    return Result(f"disk {name}", free >= floors.free_gb,
                  f"{path}: writable, {free:.1f} GiB free (floor {floors.free_gb:g})")


def dirs(state_dir: Path | None) -> dict[str, Path]:
    """The directories a replica of this node writes: the state dir, the job's checkpoint
    dir (a local one), where saves are staged, and the node-local dir ($PERDURE_NODE_DIR)."""
    found: dict[str, Path] = {}
    state = os.environ.get("PERDURE_STATE_DIR") or (str(state_dir) if state_dir else "")
    if state:
        found["state"] = Path(state)
    ckpt = os.environ.get("PERDURE_CHECKPOINT_DIR", "")
    if ckpt and "://" not in ckpt:
        found["checkpoint"] = Path(ckpt)
    found["staging"] = Path(os.environ.get("PERDURE_STAGING_DIR") or tempfile.gettempdir())
    if os.environ.get("PERDURE_NODE_DIR"):
        found["node"] = Path(os.environ["PERDURE_NODE_DIR"])
    return found


def gpus(floors: Floors) -> list[Result]:
    """Each GPU: a matmul with a floor, memory it can allocate, and no uncorrected ECC
    error (NVML, when nvidia-ml-py is installed). None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [check(i, floors) for i in range(torch.cuda.device_count())
            for check in (_gpu_matmul, _gpu_memory, _gpu_ecc)]


def _gpu_matmul(i: int, floors: Floors) -> Result:
    import torch

    with torch.cuda.device(i):
        rate = _matmul_rate(4096, 0.5, f"cuda:{i}", torch.bfloat16) / 1e12
    if rate < 0:
        return Result(f"gpu {i} matmul", False, "non-finite results")
    return Result(f"gpu {i} matmul", rate >= floors.gpu_tflops,
                  f"bf16 4096x4096 at {rate:.1f} TFLOP/s (floor {floors.gpu_tflops:g})")


def _gpu_memory(i: int, floors: Floors) -> Result:
    import torch

    free, total = torch.cuda.mem_get_info(i)
    want = floors.gpu_memory_mb * MIB
    try:
        block = torch.empty(want, dtype=torch.uint8, device=f"cuda:{i}")
        block.fill_(0xA5)
        ok = int(block[::MIB].to(torch.int32).sum().item()) == 0xA5 * len(block[::MIB])
        del block
        torch.cuda.empty_cache()
    except RuntimeError as exc:  # torch.OutOfMemoryError, a CUDA error
        return Result(f"gpu {i} memory", False, f"{floors.gpu_memory_mb} MiB: {exc}")
    return Result(f"gpu {i} memory", ok,
                  f"{free // MIB} of {total // MIB} MiB free; {floors.gpu_memory_mb} MiB "
                  f"written and read back {'intact' if ok else 'CORRUPTED'}")


def _gpu_ecc(i: int, floors: Floors) -> Result:
    try:
        import pynvml
    except ImportError:
        return Result(f"gpu {i} ecc", True, "not checked: nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        errors = pynvml.nvmlDeviceGetTotalEccErrors(
            handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
    except pynvml.NVMLError as exc:
        return Result(f"gpu {i} ecc", True, f"not checked: NVML says {exc}")
    return Result(f"gpu {i} ecc", errors == 0,
                  f"{errors} uncorrected ECC errors since the driver loaded")
