"""A controller crash and a supervisor crash: adoption, exactly-once exits, no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_local_support import (
    IGNORE_SIGTERM,
    NODES,
    SIGKILL,
    backend,
    collect,
    make_launch,
    only,
    pid_alive,
    ready_child,
    wait_for_file,
    wait_gone,
    wait_started,
)

from perdure import statedir
from perdure.backends.local import LocalBackend
from perdure.core.events import LaunchFailed, ReplicaExited, ReplicaStarted, Stop

__all__ = ["backend"]


def test_adopted_launches_report_each_exit_exactly_once(
    backend: LocalBackend, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    finished = make_launch(tmp_path, "import sys; sys.exit(4)", replica="worker-0")
    release = tmp_path / "release"
    waiting = make_launch(
        tmp_path,
        f"import os, time\nwhile not os.path.exists('{release}'): time.sleep(0.01)\n",
        replica="worker-1",
    )
    backend.launch(finished)
    backend.launch(waiting)
    wait_for_file(state / "launches" / finished.launch_id / "exit.json")
    wait_for_file(state / "launches" / waiting.launch_id / "status.json")
    # The controller "crashes": its backend is abandoned, never polled or closed again.

    restarted = LocalBackend(state, NODES)
    adopted = restarted.adopt([finished.launch_id, waiting.launch_id])
    exited = only(adopted, ReplicaExited, finished.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 4
    only(adopted, ReplicaStarted, waiting.launch_id)
    assert not [
        o for o in adopted if isinstance(o, ReplicaExited) and o.launch_id == waiting.launch_id
    ]

    release.write_text("go")
    seen = collect(restarted, {waiting.launch_id})
    assert only(seen, ReplicaExited, waiting.launch_id).exit_code == 0  # type: ignore[attr-defined]
    time.sleep(0.3)
    assert restarted.poll() == []
    # Adopting again what is already watched or already reported starts nothing.
    assert restarted.adopt([]) == []


def test_stop_escalation_survives_a_controller_crash(backend: LocalBackend, tmp_path: Path) -> None:
    code, ready = ready_child(tmp_path, "stubborn", IGNORE_SIGTERM)
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    wait_for_file(ready)
    asked = time.time()
    backend.stop(Stop(launch.launch_id, signal.SIGTERM, grace=0.4, reason="test"))
    # The controller "crashes": its backend is abandoned, never polled or closed again.

    restarted = LocalBackend(tmp_path / "state", NODES)
    seen = restarted.adopt([launch.launch_id])
    seen += collect(restarted, {launch.launch_id})
    exited = only(seen, ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited)
    assert (exited.exit_code, exited.signal) == (137, SIGKILL)
    assert exited.time - asked >= 0.35


def test_adopt_reports_unknown_and_never_started_launches(tmp_path: Path) -> None:
    state = tmp_path / "state"
    backend = LocalBackend(state, NODES)
    # The controller died between writing launch.json and spawning the supervisor.
    marker = tmp_path / "ran"
    launch = make_launch(tmp_path, f"open('{marker}', 'w').close()", launch_id="orphan")
    orphan = Path(statedir.launch_dir(state.resolve(), "orphan"))
    orphan.mkdir(parents=True)
    statedir.write_json(
        orphan / statedir.LAUNCH,
        {
            "launch_id": "orphan",
            "node": "a",
            "command": list(launch.command),
            "env": {},
            "cwd": str(tmp_path),
            "memory_mb": None,
            "stdout": str(tmp_path / "orphan.out"),
            "stderr": str(tmp_path / "orphan.err"),
        },
    )
    seen = backend.adopt(["orphan", "never-heard-of"])
    failed = {o.launch_id: o for o in seen if isinstance(o, LaunchFailed)}
    assert set(failed) == {"orphan", "never-heard-of"} and len(seen) == 2
    assert "never started" in failed["orphan"].message
    assert "unknown" in failed["never-heard-of"].message
    assert backend.poll() == []

    # A supervisor that starts after all (it was only slow) must not run a replica now.
    late = subprocess.run(
        [sys.executable, "-m", "perdure.backends.node.supervisor", str(orphan)],
        timeout=30,
        check=False,
    )
    assert late.returncode == 0
    assert not marker.exists() and not (orphan / statedir.STATUS).exists()
    assert not (orphan / statedir.EXIT).exists()
    assert "gave this launch up" in (orphan / statedir.SUPERVISOR_LOG).read_text()


def test_adopting_a_launch_whose_supervisor_is_still_starting_gives_it_up(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    backend = LocalBackend(state, NODES)
    marker = tmp_path / "ran"
    launch = make_launch(tmp_path, f"open('{marker}', 'w').close()")
    backend.launch(launch)
    # A second controller adopts at once, before the supervisor (~50 ms to start) claimed it.
    seen = LocalBackend(state, NODES).adopt([launch.launch_id])
    assert [type(o) for o in seen] == [LaunchFailed]
    # The supervisor then starts nothing: it exits without a status or an exit record.
    failed = only(
        collect(backend, {launch.launch_id}, LaunchFailed), LaunchFailed, launch.launch_id
    )
    assert isinstance(failed, LaunchFailed) and "given up by another controller" in failed.message
    assert not marker.exists()
    assert not (state / "launches" / launch.launch_id / "status.json").exists()


def test_adopt_watches_a_supervisor_that_claimed_its_launch(tmp_path: Path) -> None:
    state = tmp_path / "state"
    backend = LocalBackend(state, NODES)
    launch = make_launch(tmp_path, "import time; time.sleep(0.3)")
    backend.launch(launch)
    wait_for_file(state / "launches" / launch.launch_id / "claim.json")
    second = LocalBackend(state, NODES)
    seen = second.adopt([launch.launch_id])
    assert not [o for o in seen if isinstance(o, LaunchFailed)], seen
    seen += collect(second, {launch.launch_id})
    only(seen, ReplicaStarted, launch.launch_id)
    exited = only(seen, ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 0


def test_killed_supervisor_takes_its_replica_and_leftovers_down(
    backend: LocalBackend, tmp_path: Path
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    setup = (
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '60'])\n"
        f"pathlib.Path('{pid_file}').write_text(str(p.pid))"
    )
    code, ready = ready_child(tmp_path, "doomed", setup)
    launch = make_launch(tmp_path, code)
    backend.launch(launch)
    wait_for_file(ready)
    started = wait_started(backend, launch.launch_id)
    status = json.loads(
        (tmp_path / "state" / "launches" / launch.launch_id / "status.json").read_text()
    )
    os.kill(status["supervisor_pid"], signal.SIGKILL)

    seen = collect(backend, {launch.launch_id}, LaunchFailed)
    failed = only(seen, LaunchFailed, launch.launch_id)
    assert isinstance(failed, LaunchFailed) and "supervisor" in failed.message
    wait_gone(started.pid)  # PR_SET_PDEATHSIG
    wait_gone(int(pid_file.read_text()))  # swept by the backend
    assert backend.poll() == []


def test_a_dead_spawner_fails_what_it_had_not_started_and_is_replaced(
    backend: LocalBackend, tmp_path: Path
) -> None:
    first = make_launch(tmp_path, "pass", replica="worker-0")
    backend.launch(first)
    collect(backend, {first.launch_id})
    spawner = backend._spawner.process  # the warm process that forks supervisors
    assert spawner is not None
    os.kill(spawner.pid, signal.SIGSTOP)  # it can no longer read what it is sent
    marker = tmp_path / "ran"
    pending = make_launch(tmp_path, f"open('{marker}', 'w').close()", replica="worker-1")
    backend.launch(pending)
    os.kill(spawner.pid, signal.SIGKILL)
    spawner.wait()

    failed = only(
        collect(backend, {pending.launch_id}, LaunchFailed), LaunchFailed, pending.launch_id
    )
    assert isinstance(failed, LaunchFailed) and "the spawner exited" in failed.message
    third = make_launch(tmp_path, "import sys; sys.exit(5)", replica="worker-2")
    backend.launch(third)  # a new spawner is started
    exited = only(collect(backend, {third.launch_id}), ReplicaExited, third.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 5
    assert not marker.exists()


def test_close_leaves_replicas_running_for_the_next_controller(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = LocalBackend(state, NODES)
    code, ready = ready_child(tmp_path, "survivor")
    launch = make_launch(tmp_path, code)
    first.launch(launch)
    wait_for_file(ready)
    spawner = first._spawner.process
    assert spawner is not None
    first.close()
    assert spawner.wait(timeout=5) == 0  # the spawner exits on close ...
    second = LocalBackend(state, NODES)
    seen = second.adopt([launch.launch_id])
    started = only(seen, ReplicaStarted, launch.launch_id)  # ... the replica does not
    assert isinstance(started, ReplicaStarted) and pid_alive(started.pid)
    second.stop(Stop(launch.launch_id, signal.SIGTERM, grace=5.0, reason="test"))
    exited = only(collect(second, {launch.launch_id}), ReplicaExited, launch.launch_id)
    assert isinstance(exited, ReplicaExited) and exited.exit_code == 143
