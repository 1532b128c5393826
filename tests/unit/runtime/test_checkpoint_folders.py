"""Which framework checkpoint folder (a Trainer's checkpoint-N) a resume may use."""

from __future__ import annotations

from pathlib import Path

import pytest

from perdure.backends.local.progress import ProgressReader
from perdure.runtime.checkpoint import folders
from perdure.runtime.checkpoint.folders import Folder, choose


def folder(step: int, *done: tuple[int, int]) -> Folder:
    return Folder(f"checkpoint-{step}", step, frozenset(done))


def test_the_newest_folder_every_rank_finished_is_chosen() -> None:
    choice = choose([folder(10, (0, 2), (1, 2)), folder(20, (0, 2), (1, 2)),
                     folder(30, (1, 2)), folder(40)])
    assert (choice.name, choice.step) == ("checkpoint-20", 20)
    assert choice.incomplete == ("checkpoint-40", "checkpoint-30")
    note = choice.note()
    assert note is not None and "checkpoint-40, checkpoint-30" in note and "checkpoint-20" in note


def test_a_world_size_change_needs_every_rank_of_the_world_that_saved() -> None:
    assert choose([folder(10, (0, 1))]).step == 10  # saved on one rank
    assert choose([folder(10, (0, 2), (0, 1))]).step == 10  # the 1-rank save finished
    assert choose([folder(10, (0, 4), (1, 4), (2, 4))]).step is None
    nothing = choose([])
    assert nothing.name is None and nothing.note() is None


def test_agree_resume_moves_newer_incomplete_folders_aside(tmp_path: Path) -> None:
    for step in (10, 20):
        (tmp_path / f"checkpoint-{step}").mkdir()
    folders.mark_complete(tmp_path / "checkpoint-10", 0, 1)
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint folder: left alone
    choice = folders.agree_resume(tmp_path)
    assert choice.name == "checkpoint-10" and choice.incomplete == ("checkpoint-20",)
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["checkpoint-10", "checkpoint-x", "incomplete-checkpoint-20"]
    assert folders.agree_resume(tmp_path).incomplete == ()


@pytest.mark.parametrize("squatter", ["file", "symlink to a folder", "dangling symlink",
                                      "folder"])
def test_whatever_sits_at_the_aside_name_is_replaced(tmp_path: Path, squatter: str) -> None:
    """A resume used to fail on every retry when a file or a symlink sat at
    incomplete-checkpoint-N (rmtree ignored it, then the rename failed)."""
    (tmp_path / "checkpoint-20" / "weights").mkdir(parents=True)
    aside = tmp_path / "incomplete-checkpoint-20"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("kept")
    if squatter == "file":
        aside.write_text("not a folder")
    elif squatter == "folder":
        (aside / "old").mkdir(parents=True)
    else:
        aside.symlink_to(elsewhere if squatter == "symlink to a folder" else tmp_path / "gone")
    choice = folders.agree_resume(tmp_path)
    assert choice.name is None and choice.incomplete == ("checkpoint-20",)
    assert aside.is_dir() and not aside.is_symlink() and (aside / "weights").is_dir()
    assert (elsewhere / "keep").read_text() == "kept"  # a symlink's target is left alone


def test_runtime_notes_reach_the_controller_before_any_step(tmp_path: Path) -> None:
    reader = ProgressReader()
    log = tmp_path / "progress.jsonl"
    log.write_text('{"kind": "note", "message": "skipped checkpoint-20", "t": 1}\n')
    obs = reader.read("l1", str(tmp_path), now=0.0)  # no step yet: the note goes at once
    assert obs is not None and obs.step is None and obs.notes == ("skipped checkpoint-20",)
    with log.open("a") as f:
        f.write('{"kind": "steps", "t": 2, "t0": 1, "first": 1, "last": 3, '
                '"seconds": 0.3, "count": 3}\n')
    assert reader.read("l1", str(tmp_path), now=0.1) is None  # read again within 0.5 s: not yet
    obs = reader.read("l1", str(tmp_path), now=0.2, final=True)  # exited: read at once
    assert obs is not None and obs.step == 3 and obs.notes == ()
