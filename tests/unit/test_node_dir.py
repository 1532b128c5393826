"""The node-local directory the controller gives each job ($PERDURE_NODE_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

from perdure.cli.common import node_dir
from perdure.core.launchenv import LaunchSettings
from perdure.core.launchenv import node_dir as job_node_dir


def test_made_private_to_this_user_and_stable(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    first = node_dir(tmp_path / "state", shm)
    assert first is not None and Path(first).parent == shm
    assert os.stat(first).st_mode & 0o777 == 0o700
    assert node_dir(tmp_path / "state", shm) == first  # the same state dir: the same place
    assert node_dir(tmp_path / "other", shm) != first


def test_refused_when_the_name_is_not_a_private_directory(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    taken = node_dir(tmp_path / "state", shm)
    assert taken is not None
    os.chmod(taken, 0o777)  # someone else could plant files in it
    assert node_dir(tmp_path / "state", shm) is None
    os.rmdir(taken)
    os.symlink(tmp_path, taken)
    assert node_dir(tmp_path / "state", shm) is None
    assert node_dir(tmp_path / "state", tmp_path / "no-shm") is None


def test_each_job_gets_its_own_subdirectory() -> None:
    settings = LaunchSettings("/state", "/usr/bin/python3", node_dir="/dev/shm/perdure-x")
    assert job_node_dir("job-1", settings) == "/dev/shm/perdure-x/job-1"
    assert job_node_dir("job-1", LaunchSettings("/state", "/usr/bin/python3")) is None
