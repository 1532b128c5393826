"""Atomic commit, discovery and retention of checkpoint directories.

Layout under the checkpoint URL::

    step-00000100/                 a committed checkpoint
        __0_0.distcp __1_0.distcp  one DCP shard per rank that holds items to write
        .metadata                  DCP's metadata (pickle; read by stock dcp.load only)
        perdure.json               the same metadata as JSON (read by perdure's restore)
        COMMITTED                  the commit marker, written last (JSON: step, world size,
                                   time, every file with its size and checksum)
    step-00000200.tmp-<token>/     a save in progress, or the leftover of a crashed one

The marker is written last, once every shard of every rank is durable, then the directory is
renamed where the store can; elsewhere it is written in place and the marker alone decides.
Restore takes only a directory whose marker is present and whose files have the listed sizes.
"""

from __future__ import annotations

import errno
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from perdure.runtime.checkpoint import checksum
from perdure.runtime.checkpoint.storage import Storage

MARKER = "COMMITTED"
METADATA_JSON = "perdure.json"
DCP_METADATA = ".metadata"
FORMAT = "perdure-checkpoint/1"
_NAME = re.compile(r"^step-(\d{8,})(?:\.(tmp|trash|old)-([0-9A-Za-z_-]+))?$")
_LEFTOVER = {
    "tmp": "unfinished save, no commit marker",
    "trash": "deletion interrupted",
    "old": "replaced by a newer save of the same step",
}


def final_name(step: int) -> str:
    """Directory name of the committed checkpoint for ``step``."""
    return f"step-{step:08d}"


def tmp_name(step: int, token: str) -> str:
    """Directory name a save of ``step`` writes to before it is published."""
    return f"{final_name(step)}.tmp-{token}"


def new_token() -> str:
    """A short unique token for temporary names."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Committed:
    """A complete checkpoint: its directory name, step and commit marker."""

    name: str
    step: int
    marker: dict[str, Any]


@dataclass(frozen=True)
class Partial:
    """A directory that is not a complete checkpoint, and why."""

    name: str
    step: int
    reason: str

    def describe(self) -> str:
        """'skipped partial checkpoint step-...: reason', for logs and reports."""
        return f"skipped partial checkpoint {self.name}: {self.reason}"


@dataclass(frozen=True)
class Scan:
    """What a checkpoint directory holds: complete checkpoints (oldest first) and the rest."""

    complete: list[Committed]
    partial: list[Partial]

    @property
    def latest(self) -> Committed | None:
        """The newest complete checkpoint, or None."""
        return self.complete[-1] if self.complete else None


def marker_doc(
    step: int,
    world_size: int,
    files: dict[str, int],
    crcs: tuple[str, dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The commit marker: every file's size and (algorithm, checksum per file). No side effects."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "step": step,
        "world_size": world_size,
        "saved_at": time.time(),
        "files": dict(sorted(files.items())),
    }
    if crcs is not None:
        doc["checksum"] = crcs[0]
        doc["checksums"] = {f: checksum.text(c) for f, c in sorted(crcs[1].items())}
    return doc


def verify_file(marker: dict[str, Any], file: str, data: bytes) -> str | None:
    """Why ``data`` is not the ``file`` the commit marker recorded, or None. No side effects."""
    algorithm = marker.get("checksum")
    if algorithm is None:
        return None
    if not checksum.supported(algorithm):
        return f"{file}: its {algorithm} checksum is of no known kind"
    expected = checksum.parse(marker.get("checksums", {}).get(file))
    found = checksum.update(algorithm, 0, data)
    if expected is None:
        return f"{file}: the commit marker records no checksum for it"
    if found != expected:
        return (f"{file} is corrupt: its {algorithm} is {checksum.text(found)}, the commit "
                f"marker recorded {checksum.text(expected)}")
    return None


def scan(storage: Storage, verify: bool = True) -> Scan:
    """List complete and partial checkpoints; ``verify`` also checks every listed file's size."""
    complete: list[Committed] = []
    partial: list[Partial] = []
    for name in storage.list_names():
        match = _NAME.match(name)
        if match is None:
            continue
        step = int(match.group(1))
        if match.group(2):
            partial.append(Partial(name, step, _LEFTOVER[match.group(2)]))
            continue
        marker, problem = _check(storage, name, step, verify)
        if marker is None:
            partial.append(Partial(name, step, problem))
        else:
            complete.append(Committed(name, step, marker))
    complete.sort(key=lambda c: c.step)
    partial.sort(key=lambda p: (p.step, p.name))
    return Scan(complete, partial)


def _check(storage: Storage, name: str, step: int, verify: bool) -> tuple[Any, str]:
    try:
        raw = storage.read_bytes(f"{name}/{MARKER}")
    except FileNotFoundError:
        return None, "no commit marker"
    try:
        marker = json.loads(raw)
        if marker.get("format") != FORMAT or marker.get("step") != step:
            return None, f"commit marker is not a {FORMAT} marker for step {step}"
        files = dict(marker["files"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"commit marker unreadable ({exc})"
    wrong = size_mismatch(storage, name, files) if verify else None
    if wrong is not None:
        file, actual, size = wrong
        if actual is None:
            return None, f"file {file} listed in the commit marker is missing"
        return None, f"file {file} has {actual} bytes, the commit marker says {size}"
    return marker, ""


def size_mismatch(
    storage: Storage, name: str, files: dict[str, int]
) -> tuple[str, int | None, int] | None:
    """The first of ``files`` (file -> size) in directory ``name`` whose size differs: (file,
    its size or None when missing, the size expected); one listing where the store can."""
    listed = storage.sizes(name)
    for file, size in files.items():
        actual = listed.get(file) if listed is not None else storage.size(f"{name}/{file}")
        if actual != size:
            return file, actual, size
    return None


def publish(storage: Storage, staged: str, step: int, marker: dict[str, Any]) -> str:
    """Write the commit marker into ``staged`` (every file it lists already durable), then
    make it the step's checkpoint; returns its name."""
    storage.write_bytes(f"{staged}/{MARKER}", json.dumps(marker).encode())
    storage.sync_dir(staged)
    final = final_name(step)
    if staged == final:  # written in place (no rename on this store): the marker decides
        return final
    try:  # where ``final`` is taken, the rename fails: no listing to ask first
        storage.rename(staged, final)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
        old = f"{final}.old-{new_token()}"  # a re-save of the same step replaces it
        storage.rename(final, old)
        storage.rename(staged, final)
        storage.sync_dir("")
        storage.remove_tree(old)
        return final
    storage.sync_dir("")
    return final


def remove_checkpoint(storage: Storage, name: str) -> None:
    """Delete a committed checkpoint so that no crash leaves it looking complete."""
    if storage.atomic_rename:
        doomed = f"{name}.trash-{new_token()}"
        storage.rename(name, doomed)
        storage.remove_tree(doomed)
    else:
        storage.remove_tree(f"{name}/{MARKER}")
        storage.remove_tree(name)


def retain(storage: Storage, keep: int | None, current: str) -> list[str]:
    """Delete committed checkpoints beyond the newest ``keep`` and leftovers of crashed saves.

    ``current`` and the newest complete checkpoint (a re-save of an older step, after a
    fallback, is not newer than it) are never deleted. Returns the names removed.
    """
    found = scan(storage, verify=False)
    removed: list[str] = []
    doomed = found.complete[:-keep] if keep is not None else []
    spared = {current, found.latest.name if found.latest else current}
    for committed in doomed:
        if committed.name not in spared:
            remove_checkpoint(storage, committed.name)
            removed.append(committed.name)
    for part in found.partial:
        if part.name != current:
            storage.remove_tree(part.name)
            removed.append(part.name)
    return removed
