"""Checkpoint folders a framework writes itself (a Trainer's `checkpoint-N`): which one to resume.

A framework's own save is not atomic, so after a rank's save returned `mark_complete` leaves a
marker for that rank in the folder; a folder is complete when every rank of its world left one.
On resume, `agree_resume` picks the newest complete folder and moves the incomplete newer ones
aside (the framework's own "latest" then never finds them). `choose` is the rule, with no side
effects.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Choice", "Folder", "agree_resume", "choose", "mark_complete", "scan"]

MARKERS = ".perdure-complete"
ASIDE_PREFIX = "incomplete-"
_MARKER = re.compile(r"^rank-(\d+)-of-(\d+)$")


@dataclass(frozen=True)
class Folder:
    """One `<prefix>N` folder: its step and which ranks of which world saw their save finish."""

    name: str
    step: int
    done: frozenset[tuple[int, int]]  # (rank, world size) markers found

    @property
    def complete(self) -> bool:
        worlds = {w for _, w in self.done}
        return any({r for r, w in self.done if w == world} >= set(range(world))
                   for world in worlds)


@dataclass(frozen=True)
class Choice:
    """The folder to resume from (None: start from scratch) and the newer, incomplete ones."""

    name: str | None
    step: int | None
    incomplete: tuple[str, ...]

    def note(self) -> str | None:
        """The message that names the skipped folders, or None when none was skipped."""
        if not self.incomplete:
            return None
        to = self.name or "scratch"
        return (f"checkpoint folders {', '.join(self.incomplete)} were not completed by every "
                f"rank (a replica died while saving): skipped, resuming from {to}")


def choose(folders: Sequence[Folder]) -> Choice:
    """The newest complete folder, and every (incomplete) folder newer than it. No side effects."""
    ordered = sorted(folders, key=lambda f: f.step, reverse=True)
    newer: list[str] = []
    for folder in ordered:
        if folder.complete:
            return Choice(folder.name, folder.step, tuple(newer))
        newer.append(folder.name)
    return Choice(None, None, tuple(newer))


def mark_complete(folder: str | os.PathLike[str], rank: int, world_size: int) -> None:
    """Record that `rank`'s share of the save in `folder` finished (call after the save)."""
    markers = Path(folder) / MARKERS
    markers.mkdir(parents=True, exist_ok=True)
    (markers / f"rank-{rank}-of-{world_size}").touch()


def scan(root: str | os.PathLike[str], prefix: str = "checkpoint-") -> list[Folder]:
    """The `<prefix>N` folders directly under `root` with their markers (none: [])."""
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found: list[Folder] = []
    base = Path(root)
    if not base.is_dir():
        return found
    for entry in base.iterdir():
        match = pattern.match(entry.name)
        if match is None or not entry.is_dir():
            continue
        done: set[tuple[int, int]] = set()
        markers = entry / MARKERS
        if markers.is_dir():
            for marker in markers.iterdir():
                m = _MARKER.match(marker.name)
                if m is not None:
                    done.add((int(m.group(1)), int(m.group(2))))
        found.append(Folder(entry.name, int(match.group(1)), frozenset(done)))
    return found


def _remove(path: Path) -> None:
    """Whatever sits at `path` (an earlier aside folder, a file, a symlink: never followed)."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def agree_resume(root: str | os.PathLike[str], prefix: str = "checkpoint-") -> Choice:
    """Rank 0 chooses (and moves the newer incomplete folders aside), all agree: a collective
    when a process group is up."""
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    box: list[Any] = [None]
    if not distributed or dist.get_rank() == 0:
        choice = box[0] = choose(scan(root, prefix))
        for name in choice.incomplete:  # renamed out of the `<prefix>N` pattern, kept to inspect
            _remove(Path(root) / f"{ASIDE_PREFIX}{name}")
            os.replace(Path(root) / name, Path(root) / f"{ASIDE_PREFIX}{name}")
    if distributed:
        dist.broadcast_object_list(box, src=0)
    result: Choice = box[0]
    return result
