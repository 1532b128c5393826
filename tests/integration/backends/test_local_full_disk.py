"""A full disk under the local backend: launches wait (backing off) instead of spending budgets,
and a replica that prints without end stays under its log cap instead of filling the disk.

Real processes, real sqlite, the real controller; the disk is a tiny tmpfs mounted (as root)
on the state dir's launches dir or logs dir.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_local_support import kill_everything

from perdure.backends.base import NodeInfo
from perdure.backends.local import LocalBackend
from perdure.backends.node import logcap
from perdure.controller.loop import Controller
from perdure.core.clusterspec import ClusterSpec, NodeSpec
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec
from perdure.store.sqlite import Store

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@contextlib.contextmanager
def tiny_disk(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    return filler


def job(name: str, code: str, tmp: Path) -> Job:
    spec = JobSpec.model_validate({"name": name, "pools": [
        {"name": "w", "replicas": 1, "command": ["python", "-c", code]}],
        "restart": {"max_job_retries": 0, "max_replica_restarts": 0}})
    return Job(id=f"{name}-000001", spec=spec, spec_dir=str(tmp), created=time.time(),
               replicas=make_replicas(spec))


def controller(state: Path) -> tuple[Controller, Store]:
    store = Store(state / "perdure.db")
    backend = LocalBackend(state, [NodeInfo("local", 1)], warm_pool=0)
    ctl = Controller(state, store, backend, ClusterSpec(nodes=[NodeSpec(name="local", slots=1)]),
                     LaunchSettings(str(state), sys.executable), interval=0.02)
    ctl.start()
    return ctl, store


def run_until(ctl: Controller, done: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    ctl.run(until=lambda: bool(done()) or time.monotonic() > deadline)  # type: ignore[operator]


@needs_root
def test_a_full_disk_holds_launches_and_charges_no_job(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with tiny_disk(state / "launches", "256k") as disk:
        ctl, store = controller(state)
        try:
            first, queued = job("first", "print('a')", tmp_path), job("queued", "print('b')",
                                                                        tmp_path)
            store.submit(first)
            store.submit(queued)
            filler = fill(disk)
            began = time.monotonic()
            run_until(ctl, lambda: False, 3.0)  # the disk stays full for 3 s
            for j in (first, queued):
                now = store.job(j.id)
                assert now is not None and not now.state.terminal and now.retries == {}
            said = [e.message for e in store.events(first.id) if "refused its launch" in e.message]
            assert len(said) == 1 and "No space left on device" in said[0]
            assert time.monotonic() - began < 10
            filler.unlink()  # space again: both run, neither charged
            ids = (first.id, queued.id)
            run_until(ctl, lambda: all(store.job(i).state.terminal for i in ids), 120)  # type: ignore[union-attr]
            for i in ids:
                done = store.job(i)
                assert done is not None and done.state.value == "SUCCEEDED", store.events(i)
                assert done.attempt == 1 and done.retries == {}
        finally:
            ctl.close()
            store.close()
            kill_everything(state)


@needs_root
def test_a_chatty_replica_stays_under_its_log_cap_on_a_small_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(logcap.ENV, "1")  # 1 MiB per file; it prints 12 MB on an 8 MiB disk
    code = ("import sys, time\n"
            "for i in range(12000):\n"
            "    sys.stdout.write(f'{i:06d} ' + 'x' * 1000 + '\\n')\n"
            "    if i % 200 == 0:\n"
            "        sys.stdout.flush(); time.sleep(0.1)\n"
            "print('LAST LINE', flush=True)\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with tiny_disk(state / "logs", "8m"):
        ctl, store = controller(state)
        try:
            chatty = job("chatty", code, tmp_path)
            store.submit(chatty)
            run_until(ctl, lambda: store.job(chatty.id).state.terminal, 120)  # type: ignore[union-attr]
            done = store.job(chatty.id)
            assert done is not None and done.state.value == "SUCCEEDED", store.events(chatty.id)
            out = next((state / "logs").rglob("w-0.out")).read_bytes()
            assert len(out) <= (1 << 20) + 4096
            assert out.startswith(b"=== perdure: ") and out.rstrip().endswith(b"LAST LINE")
        finally:
            ctl.close()
            store.close()
            kill_everything(state)


def test_running_out_of_descriptors_ends_nothing_and_charges_no_job(tmp_path: Path) -> None:
    # EMFILE hits the controller wherever it next opens a file: the backend's port probe or
    # the launch record (a held launch). Neither ends it.
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    ctl, store = controller(state)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hogs: list[int] = []
    try:
        one = job("fds", "print('a')", tmp_path)
        store.submit(one)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard))
        with contextlib.suppress(OSError):  # EMFILE: this process has no descriptor left
            while True:
                hogs.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(10):
            ctl.tick()
            time.sleep(0.05)
        now = store.job(one.id)
        assert now is not None and not now.state.terminal and now.retries == {}
        for fd in hogs:
            os.close(fd)
        hogs.clear()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        run_until(ctl, lambda: store.job(one.id).state.terminal, 60)  # type: ignore[union-attr]
        done = store.job(one.id)
        assert done is not None and done.state.value == "SUCCEEDED" and done.retries == {}
        said = [e.message for e in store.events() if "Too many open files" in e.message]
        assert len(said) == 1, said  # said once, not at every tick
    finally:
        for fd in hogs:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        ctl.close()
        store.close()
        kill_everything(state)
