"""Warm standby replicas: a `python SCRIPT` replica starts in an interpreter with torch imported,
and the script cannot tell it from a cold start (argv, env, cwd, sys.path, exit, errors, limits)."""

from __future__ import annotations

import itertools
import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_local_support import NODES, collect, kill_everything, only

from perdure.backends.local import LocalBackend
from perdure.core.events import Launch, ReplicaExited

_ids = itertools.count()

# Prints what a script can see of how it was started, then exits with $CODE.
PROBE = """\
import json, os, sys, time
import torch
first_line = time.time()  # torch imported: what a warm start saves
print(json.dumps({
    "first_line": first_line,
    "argv": sys.argv,
    "path0": sys.path[0],
    "file": __file__,
    "name": __name__,
    "cwd": os.getcwd(),
    "x": os.environ.get("X"),
    "error_file": os.environ.get("PERDURE_ERROR_FILE"),
    "threads": torch.get_num_threads(),
    "stdin": sys.stdin.read(),
    "main_globals": sorted(k for k in globals() if k.startswith("__")),
    # the nice value of every thread (a standby warms at the lowest priority; a replica must not)
    "nice": sorted({open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16]
                    for t in os.listdir("/proc/self/task")}),
}))
sys.exit(int(os.environ["CODE"]))
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("warm")
    (path / "sub").mkdir()
    (path / "sub" / "probe.py").write_text(PROBE)
    (path / "probemod.py").write_text(PROBE)
    return path


@pytest.fixture(scope="module")
def warm_backend(root: Path) -> Iterator[LocalBackend]:
    """One backend for the module, so that its pool refills while other tests run."""
    local = LocalBackend(root / "state", NODES, warm_pool=2)
    local.prewarm()
    yield local
    local.close()
    kill_everything(root / "state")


def launch(
    root: Path, command: list[str], env: dict[str, str] | None = None, memory_mb: int | None = None
) -> Launch:
    launch_id = f"w{next(_ids)}"
    return Launch(
        launch_id=launch_id,
        job_id="job",
        replica=launch_id,
        node="a",
        command=tuple(command),
        env={"OMP_NUM_THREADS": "1", "X": "from-launch", "CODE": "3", **(env or {})},
        cwd=str(root),
        memory_mb=memory_mb,
        log_prefix=str(root / "logs" / launch_id),
    )


def wait_ready(backend: LocalBackend, n: int = 2, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.warm_pool_status() or {}
        assert not status.get("disabled"), status
        if status.get("ready", 0) >= n:
            return status
        time.sleep(0.05)
    raise AssertionError(f"the warm pool had not {n} ready within {timeout}s: {status}")


def run(
    backend: LocalBackend, root: Path, the_launch: Launch, state: str = "state"
) -> tuple[ReplicaExited, bool]:
    """Launch, wait for the exit; the exit and whether the start was warm."""
    backend.launch(the_launch)
    seen = collect(backend, {the_launch.launch_id}, timeout=60)
    exited = only(seen, ReplicaExited, the_launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    status_path = root / state / "launches" / the_launch.launch_id / "status.json"
    return exited, bool(json.loads(status_path.read_text())["warm"])


def output(root: Path, the_launch: Launch, stream: str = "out") -> list[str]:
    return (root / "logs" / f"{the_launch.launch_id}.{stream}").read_text().splitlines()[1:]


def seen_by_script(root: Path, the_launch: Launch, started: float) -> tuple[dict[str, Any], float]:
    """What the probe printed, and the time from launch() to torch imported in the script."""
    seen: dict[str, Any] = json.loads(output(root, the_launch)[0])
    latency = float(seen.pop("first_line")) - started
    # The launch's own error file: launches/<id>/error.json under each backend's state dir.
    seen["error_file"] = (
        str(seen["error_file"]).split("/launches/")[1].replace(the_launch.launch_id, "ID")
    )
    return seen, latency


def test_warm_start_looks_like_a_cold_start(warm_backend: LocalBackend, root: Path) -> None:
    wait_ready(warm_backend)
    command = [sys.executable, "sub/probe.py", "--steps", "2"]
    warm_launch = launch(root, command)
    started = time.time()
    exited, warm = run(warm_backend, root, warm_launch)
    assert warm and exited.exit_code == 3
    warm_seen, warm_latency = seen_by_script(root, warm_launch, started)

    cold_backend = LocalBackend(root / "cold-state", NODES, warm_pool=0)
    try:
        cold_launch = launch(root, command)
        started = time.time()
        exited, warm = run(cold_backend, root, cold_launch, "cold-state")
        assert not warm and exited.exit_code == 3
        cold_seen, cold_latency = seen_by_script(root, cold_launch, started)
    finally:
        cold_backend.close()
    print(
        f"\nlaunch -> torch imported in the script: warm {warm_latency:.3f} s, "
        f"cold {cold_latency:.3f} s"
    )
    assert warm_latency < min(2.0, cold_latency)  # loosely: the machine may be busy
    assert warm_seen == cold_seen
    assert warm_seen["argv"] == ["sub/probe.py", "--steps", "2"]
    assert warm_seen["path0"] == str(root / "sub") and warm_seen["threads"] == 1


def test_module_start_is_warm(warm_backend: LocalBackend, root: Path) -> None:
    wait_ready(warm_backend, 1)
    the_launch = launch(root, [sys.executable, "-m", "probemod", "a"], {"CODE": "0"})
    exited, warm = run(warm_backend, root, the_launch)
    assert warm and exited.exit_code == 0
    seen = json.loads(output(root, the_launch)[0])
    assert seen["argv"] == [str(root / "probemod.py"), "a"]
    assert (seen["path0"], seen["cwd"], seen["name"]) == (str(root), str(root), "__main__")


def test_exception_in_a_warm_start_is_recorded(warm_backend: LocalBackend, root: Path) -> None:
    (root / "fails.py").write_text(
        "from perdure.runtime.errors import install_excepthook\n"
        "install_excepthook()  # what perdure.init() installs\n"
        "def train():\n"
        "    raise ValueError('bad shape')\n"
        "train()\n"
    )
    wait_ready(warm_backend, 1)
    the_launch = launch(root, [sys.executable, "fails.py"])
    exited, warm = run(warm_backend, root, the_launch)
    assert warm and (exited.exit_code, exited.signal) == (1, None)
    assert exited.error is not None
    assert (exited.error.type, exited.error.message) == ("ValueError", "bad shape")
    assert exited.error.source == "error_file"
    err = output(root, the_launch, "err")
    # The traceback starts at the script, as a cold start prints it: no frame of perdure's.
    assert err[0] == "Traceback (most recent call last):"
    assert err[1].startswith(f'  File "{root / "fails.py"}", line 5')
    assert err[-1] == "ValueError: bad shape"
    assert not any("warmstart" in line for line in err)


def test_memory_limit_applies_to_a_warm_start(warm_backend: LocalBackend, root: Path) -> None:
    (root / "hog.py").write_text("x = bytearray(900 * 1024 * 1024)\nimport time\ntime.sleep(5)\n")
    wait_ready(warm_backend, 1)
    the_launch = launch(root, [sys.executable, "hog.py"], memory_mb=700)
    exited, warm = run(warm_backend, root, the_launch)
    assert warm and (exited.exit_code, exited.oom) == (137, True)


def test_python_c_starts_cold_and_the_pool_refills(warm_backend: LocalBackend, root: Path) -> None:
    before = wait_ready(warm_backend)  # refilled after the tests above used standbys
    assert before["used"] >= 1
    the_launch = launch(root, [sys.executable, "-c", "import sys; sys.exit(4)"])
    exited, warm = run(warm_backend, root, the_launch)
    assert not warm and exited.exit_code == 4
    after = warm_backend.warm_pool_status() or {}
    assert (after["used"], after["ready"]) == (before["used"], 2)  # no standby was spent


DDP = """\
import os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
rank = dist.get_rank()
loss = model(torch.full((2, 4), float(rank + 1))).sum()
loss.backward()
grad = model.module.weight.grad.clone()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
print(f"rank {rank} of {dist.get_world_size()} sum {total.item()} grad {grad.sum().item():.4f}")
dist.destroy_process_group()
"""


def test_ddp_runs_in_warm_starts(warm_backend: LocalBackend, root: Path) -> None:
    (root / "ddp.py").write_text(DDP)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    wait_ready(warm_backend)
    launches = [
        launch(
            root,
            [sys.executable, "ddp.py"],
            {
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "CODE": "0",
            },
        )
        for rank in range(2)
    ]
    for the_launch in launches:
        warm_backend.launch(the_launch)
    seen = collect(warm_backend, {x.launch_id for x in launches}, timeout=60)
    lines = []
    for the_launch in launches:
        exited = only(seen, ReplicaExited, the_launch.launch_id)
        assert isinstance(exited, ReplicaExited) and exited.exit_code == 0, exited
        status_path = root / "state" / "launches" / the_launch.launch_id / "status.json"
        assert json.loads(status_path.read_text())["warm"]
        lines.append(output(root, the_launch)[0])
    # Gradients are averaged across ranks: both see the same (inputs 1 and 2: mean 1.5 * 2 * 4).
    assert lines == [f"rank {r} of 2 sum 1.0 grad 12.0000" for r in range(2)]


def test_a_group_launched_before_any_standby_is_ready_starts_warm(root: Path) -> None:
    """The first launches wait for the template (one torch import), then all start warm."""
    backend = LocalBackend(root / "group-state", NODES)  # warm pool "auto", not prewarmed
    try:
        launches = [launch(root, [sys.executable, "sub/probe.py"], {"CODE": "0"})
                    for _ in range(4)]
        for the_launch in launches:
            backend.launch(the_launch)
        seen = collect(backend, {x.launch_id for x in launches}, timeout=120)
        for the_launch in launches:
            exited = only(seen, ReplicaExited, the_launch.launch_id)
            assert isinstance(exited, ReplicaExited) and exited.exit_code == 0, exited
            status = root / "group-state" / "launches" / the_launch.launch_id / "status.json"
            assert json.loads(status.read_text())["warm"]
        pool = backend.warm_pool_status() or {}
        assert (pool["template"], pool["size"], pool["held"]) == ("ready", 4, 0), pool
        wait_ready(backend, 4, timeout=30)  # and the used standbys are replaced (forks)
    finally:
        backend.close()
        kill_everything(root / "group-state")


def test_without_the_template_standbys_import_torch_themselves(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERDURE_WARM_FORK", "0")
    backend = LocalBackend(root / "exec-state", NODES, warm_pool=1)
    try:
        backend.prewarm()
        wait_ready(backend, 1, timeout=120)
        the_launch = launch(root, [sys.executable, "sub/probe.py"])
        exited, warm = run(backend, root, the_launch, "exec-state")
        assert warm and exited.exit_code == 3
        assert (backend.warm_pool_status() or {})["template"] == "off"
        seen = json.loads(output(root, the_launch)[0])
        assert seen["nice"] == ["0"] and seen["threads"] == 1
    finally:
        backend.close()
        kill_everything(root / "exec-state")
