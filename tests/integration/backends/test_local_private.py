"""What the local backend writes is private: a launch's env (API keys, the job's secret) and
its output are readable by its user only, whatever the umask."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

from test_local_support import NODES, collect, kill_everything, make_launch, only

from perdure.backends.local import LocalBackend
from perdure.core.events import ReplicaExited


def test_launch_files_are_0600_and_their_directories_0700(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old = os.umask(0o022)  # the usual umask: files 0644 unless created with a mode
    try:
        backend = LocalBackend(state, NODES, warm_pool=0)
        launch = make_launch(tmp_path, "import os; print(os.environ['API_KEY'])",
                             env={"API_KEY": "sk-live-123"})
        launch = replace(launch, log_prefix=str(state / "logs" / "job" / "worker-0"))
        backend.launch(launch)
        exited = only(collect(backend, {launch.launch_id}), ReplicaExited, launch.launch_id)
        assert isinstance(exited, ReplicaExited) and exited.exit_code == 0
        backend.close()
    finally:
        os.umask(old)
        kill_everything(state)
    seen = []
    for root, dirs, files in os.walk(state):
        for name in [*dirs, *files]:
            path = Path(root) / name
            try:
                mode = stat.S_IMODE(path.stat().st_mode)
            except FileNotFoundError:  # an atomic write's temp file, renamed meanwhile
                continue
            assert mode & 0o077 == 0, f"{path.relative_to(state)} is {mode:o}"
            seen.append(path.relative_to(state).as_posix())
    assert stat.S_IMODE((state / "launches").stat().st_mode) == 0o700
    launch_dir = f"launches/{launch.launch_id}"
    for expected in (f"{launch_dir}/launch.json", f"{launch_dir}/supervisor.log",
                     f"{launch_dir}/exit.json", "launches/.supervisors.log",
                     "logs/job/worker-0.out"):
        assert expected in seen
    assert "sk-live-123" in (state / "logs" / "job" / "worker-0.out").read_text()
