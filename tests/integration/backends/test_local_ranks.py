"""A replica of several processes under the local supervisor: each local rank gets its own
RANK and error file; the first to fail fails the replica, and the others are stopped."""

from __future__ import annotations

import json
import time
from pathlib import Path

from test_local_support import backend, collect, make_launch, only

from perdure.backends.local import LocalBackend
from perdure.core.events import ReplicaExited

__all__ = ["backend"]  # the fixture, imported for pytest

# Rank 2 raises (through the runtime's error file); ranks 0 and 1 would run for 10 minutes.
FAILING = (
    "import os, time\n"
    "from perdure.runtime.errors import record\n"
    "open(os.path.join(os.environ['OUT'], 'rank-' + os.environ['RANK']), 'w').write("
    "os.environ['LOCAL_RANK'] + ' ' + os.environ['PERDURE_ERROR_FILE'])\n"
    "@record\n"
    "def main():\n"
    "    if os.environ['LOCAL_RANK'] == '2':\n"
    "        time.sleep(1)\n"
    "        raise ValueError('rank two broke')\n"
    "    time.sleep(600)\n"
    "main()\n"
)


def test_the_first_failed_rank_fails_the_replica_and_the_rest_are_stopped(
        backend: LocalBackend, tmp_path: Path) -> None:
    launch = make_launch(tmp_path, FAILING, env={
        "OUT": str(tmp_path), "PERDURE_PROCS_PER_REPLICA": "3", "RANK": "3",
        "LOCAL_RANK": "0", "ROLE_RANK": "3"})
    began = time.time()
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}, timeout=60), ReplicaExited,
                  launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert time.time() - began < 30  # ranks 0 and 1 did not run their 10 minutes
    assert (exited.exit_code, exited.local_rank) == (1, 2)
    assert exited.error is not None and exited.error.type == "ValueError"
    assert exited.error.message == "rank two broke"
    seen = {f.name: f.read_text().split() for f in tmp_path.glob("rank-*")}
    directory = tmp_path / "state" / "launches" / launch.launch_id
    assert seen == {"rank-3": ["0", str(directory / "error.json")],
                    "rank-4": ["1", str(directory / "error.1.json")],
                    "rank-5": ["2", str(directory / "error.2.json")]}
    status = json.loads((directory / "status.json").read_text())
    assert len(status["ranks"]) == 3 and status["ranks"][0]["pid"] == status["pid"]
    stop = json.loads((directory / "stop.json").read_text())
    assert stop["notice"] is None and "local rank 2" in stop["reason"]  # a plain stop


def test_a_replica_succeeds_when_every_rank_exits_zero(backend: LocalBackend,
                                                       tmp_path: Path) -> None:
    code = "import os, sys, time; time.sleep(0.2 * int(os.environ['LOCAL_RANK'])); sys.exit(0)"
    launch = make_launch(tmp_path, code, env={"PERDURE_PROCS_PER_REPLICA": "2", "RANK": "0",
                                                    "LOCAL_RANK": "0"})
    backend.launch(launch)
    exited = only(collect(backend, {launch.launch_id}, timeout=60), ReplicaExited,
                  launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.local_rank, exited.error) == (0, None, None)
