"""`perdure health-check`: one line per check, exit 0 iff all pass; `--peers` all-reduces
between two "nodes" (processes here) over gloo."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def check(*args: str, env: dict[str, str] | None = None,
          state: Path | None = None) -> subprocess.CompletedProcess[str]:
    where = ["--state-dir", str(state)] if state else []
    return subprocess.run([*PERDURE, *where, "health-check", *args], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **(env or {})})


def test_each_check_has_a_line_and_one_failure_fails_the_node(tmp_path: Path) -> None:
    state, ckpt = tmp_path / "state", tmp_path / "ckpt" / "job-1"
    state.mkdir()
    broken = tmp_path / "not-a-dir"  # a node dir that cannot be written (even by root)
    broken.write_text("")
    r = check("--min-memory-mb", str(10**9), state=state,
              env={"PERDURE_CHECKPOINT_DIR": str(ckpt), "PERDURE_STAGING_DIR": str(tmp_path),
                   "PERDURE_NODE_DIR": str(broken)})
    lines = r.stdout.splitlines()
    assert r.returncode == 1, r.stdout + r.stderr
    assert [x.split(":")[0] for x in lines] == [
        "PASS cpu", "FAIL memory", "PASS disk state", "PASS disk checkpoint",
        "PASS disk staging", "FAIL disk node"], lines
    assert lines[1].endswith(f"MiB available (floor {10**9})")
    assert lines[5].startswith(f"FAIL disk node: {broken}: not writable: ")
    # the checkpoint dir the first save makes is checked where it will be made
    assert lines[3].startswith(f"PASS disk checkpoint: {ckpt}: writable, ")
    assert not list(tmp_path.glob(".perdure-health-*"))  # it cleans up after itself


def test_peers_all_reduce_between_nodes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--peers", f"127.0.0.1:{port}", "--nodes", "2"]
    other = subprocess.Popen([*PERDURE, "health-check", *args, "--rank", "1"],
                             stdout=subprocess.PIPE, text=True)
    r = check(*args, "--rank", "0")
    out, _ = other.communicate(timeout=120)
    for rank, text in ((0, r.stdout), (1, out)):
        line = next(x for x in text.splitlines() if "peers all-reduce" in x)
        assert line.startswith(f"PASS peers all-reduce: gloo, rank {rank} of 2 nodes, 64 MiB: ")
    assert r.returncode == 0 and other.returncode == 0, r.stdout + out
    # a floor no loopback reaches fails both
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--peers", f"127.0.0.1:{port}", "--nodes", "2", "--min-peer-gbps", "1e6"]
    other = subprocess.Popen([*PERDURE, "health-check", *args, "--rank", "1"],
                             stdout=subprocess.PIPE, text=True)
    r = check(*args, "--rank", "0")
    other.communicate(timeout=120)
    assert r.returncode == 1 and "FAIL peers all-reduce" in r.stdout, r.stdout
