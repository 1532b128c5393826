"""What a replica reports just before it exits reaches the controller: the local backend reads
a launch's last progress records before it reports the exit (a note such as "incomplete
checkpoint skipped" written by a replica that then ends at once was dropped with the launch)."""

from __future__ import annotations

from pathlib import Path

from test_local_support import NODES, collect, make_launch

from perdure.backends.local import LocalBackend
from perdure.core.events import ReplicaExited, ReplicaProgress

NOTE_THEN_EXIT = """
from perdure.runtime import goodput
goodput.note("checkpoint folders checkpoint-9 were not completed by every rank: skipped")
"""

NOTE_STEP_THEN_EXIT = """
from perdure.runtime import goodput
goodput.note("checkpoint folders checkpoint-9 were not completed by every rank: skipped")
with goodput.step(10):
    pass
"""


def test_a_note_written_just_before_the_exit_arrives_before_the_exit(tmp_path: Path) -> None:
    state = tmp_path / "state"
    backend = LocalBackend(state, NODES, warm_pool=0)
    try:
        launches = [make_launch(tmp_path, code, replica=f"worker-{i}", launch_id=f"note{i}",
                                env={"PERDURE_REPORT_DIR": str(state / "launches" / f"note{i}")})
                    for i, code in enumerate((NOTE_THEN_EXIT, NOTE_STEP_THEN_EXIT))]
        for launch in launches:
            backend.launch(launch)
        seen = collect(backend, {launch.launch_id for launch in launches}, timeout=60)
        for launch, step in zip(launches, (None, 10), strict=True):
            mine = [o for o in seen if o.launch_id == launch.launch_id]
            exited = next(i for i, o in enumerate(mine) if isinstance(o, ReplicaExited))
            assert mine[exited].exit_code == 0  # type: ignore[union-attr]
            progress = [o for o in mine[:exited] if isinstance(o, ReplicaProgress)]
            notes = [n for p in progress for n in p.notes]
            assert notes == ["checkpoint folders checkpoint-9 were not completed by every "
                             "rank: skipped"], mine
            assert progress[-1].step == step
    finally:
        backend.close()

