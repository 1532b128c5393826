"""Fixtures for the checkpoint integration tests: launch N real ranks of ckpt_worker.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("ckpt_worker.py")
RunRanks = Callable[..., list[dict[str, Any]]]


def _wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> str | None:
    """Wait for every rank; stop early when one fails. Returns a problem, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            return f"rank {failed[0]} exited {codes[failed[0]]}"
        if all(c == 0 for c in codes):
            return None
        time.sleep(0.05)
    return f"ranks still running after {timeout}s"


@pytest.fixture
def run_ranks(tmp_path: Path) -> RunRanks:
    """run_ranks(scenario, world, args, timeout=120) -> each rank's result dict."""
    calls = iter(range(1_000))

    def run(scenario: str, world: int, args: dict[str, Any], timeout: float = 120) -> list[Any]:
        n = next(calls)
        out = tmp_path / f"out-{n}.json"
        args = {**args, "store": str(tmp_path / f"store-{n}"), "out": str(out)}
        logs = [tmp_path / f"log-{n}-rank{r}.txt" for r in range(world)]
        procs = []
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
            with open(logs[rank], "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, str(WORKER), scenario, json.dumps(args)],
                    env=env, stdout=log, stderr=subprocess.STDOUT,
                ))
        try:
            problem = _wait_all(procs, timeout)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        if problem:
            tails = "\n".join(f"--- rank {r}:\n{p.read_text()[-2000:]}" for r, p in enumerate(logs))
            pytest.fail(f"{scenario} on {world} ranks: {problem}\n{tails}")
        return [json.loads(out.with_suffix(f".rank{r}.json").read_text()) for r in range(world)]

    return run
