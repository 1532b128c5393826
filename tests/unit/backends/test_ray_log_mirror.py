"""On Ray the merged log travels like the other streams: pulled from the node, mirrored where
`perdure logs` reads it (no Ray cluster: the pull and the mirror are plain file code)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray")

from perdure import statedir
from perdure.backends.node.inspector import LocalInspector
from perdure.backends.node.mirror import Mirror
from perdure.backends.ray.actors import pull_launch


def test_the_merged_log_is_pulled_and_mirrored_for_perdure_logs(tmp_path: Path) -> None:
    node = tmp_path / "node-launch"
    node.mkdir()
    (node / statedir.STREAMS["out"]).write_text("said 1\n")
    (node / statedir.STREAMS["err"]).write_text("tick 1\n")
    (node / statedir.STREAMS["log"]).write_text("tick 1\nsaid 1\n")
    state = tmp_path / "state"
    prefix = str(state / "logs" / "job-1" / "attempt-1" / "worker-0")
    mirror = Mirror(str(state), "job-1.1.worker-0.1", prefix)
    assert mirror.append(pull_launch(str(node), mirror.offsets))
    reader = LocalInspector(state)
    assert reader.read_log("job-1", 1, "worker-0", "log", 0) == b"tick 1\nsaid 1\n"
    assert reader.read_log("job-1", 1, "worker-0", "out", 0) == b"said 1\n"
