"""Restore the newest committed checkpoint that loads: when one fails for any reason, say why
and fall back to the one before it, all ranks together.

Rank 0 lists the checkpoints and reads each candidate's metadata, and broadcasts it; every rank
learns every rank's outcome before the next candidate, so all restore the same step.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException

from perdure.runtime.checkpoint import commit
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.errors import CheckpointError
from perdure.runtime.checkpoint.metadata import decode_checksums, decode_metadata
from perdure.runtime.checkpoint.reader import describe
from perdure.runtime.checkpoint.restore import restore
from perdure.runtime.checkpoint.storage import Storage

log = logging.getLogger("perdure.checkpoint")


@dataclass
class Outcome:
    """The step restored (None: none), the partial checkpoints skipped, and the failures."""

    step: int | None = None
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def listing(storage: Storage, step: int | None) -> tuple[list[tuple[str, int]], list[str],
                                                          list[int]]:
    """Rank 0: the checkpoints to try, newest first (only ``step`` when given), the partial
    ones skipped, and every committed step."""
    found = commit.scan(storage)
    skipped = [p.describe() for p in found.partial]
    complete = [(c.name, c.step) for c in reversed(found.complete)]
    if step is not None:
        complete = [c for c in complete if c[1] == step]
    return complete, skipped, [c.step for c in found.complete]


def read_metadata(storage: Storage, name: str) -> tuple[Any, str | None]:
    """Rank 0: checkpoint ``name``'s metadata document, or why it cannot be used."""
    try:
        marker = json.loads(storage.read_bytes(f"{name}/{commit.MARKER}"))
        raw = storage.read_bytes(f"{name}/{commit.METADATA_JSON}")
        problem = commit.verify_file(marker, commit.METADATA_JSON, raw)
        if problem is not None:
            return None, problem
        return json.loads(raw), None  # every rank decodes it, and fails alike if malformed
    except Exception as exc:
        return None, f"{commit.METADATA_JSON} cannot be read: {describe(exc)}"


def restore_newest(
    state: MutableMapping[str, Any], storage: Storage, comm: Comm, step: int | None
) -> Outcome:
    """Load the newest checkpoint that loads (or exactly ``step``) into ``state``."""
    listed: Any = None
    if comm.rank == 0:
        try:
            listed = listing(storage, step)
        except Exception as exc:  # every rank raises it, none waits for the others
            listed = f"{type(exc).__name__}: {exc}"
    listed = comm.broadcast_object(listed)
    if isinstance(listed, str):
        raise CheckpointError(f"cannot list the checkpoints in {storage.url}: {listed}")
    candidates, skipped, steps = listed
    outcome = Outcome(skipped=list(skipped))
    for line in skipped:
        log.warning("%s", line)
    if not candidates and step is not None:
        raise CheckpointError(
            f"there is no committed checkpoint of step {step} in {storage.url}; committed "
            f"steps: {steps}. Pick one of those, or use restore_latest()."
        )
    errors: list[BaseException | None] = []
    for name, found in candidates:
        reason, mine = _attempt(state, storage, comm, name)
        if reason is None:
            if outcome.failed:
                log.warning("restored %s instead of the newer checkpoint(s) that failed to load",
                            name)
            outcome.step = found
            return outcome
        errors.append(mine)
        outcome.failed.append(f"{name}: {reason}")
        if len(outcome.failed) < len(candidates):
            log.warning("checkpoint %s cannot be restored (%s); falling back to the one before "
                        "it", name, reason)
    if outcome.failed:
        raise _all_failed(storage, outcome.failed, errors[0])
    return outcome


def _attempt(
    state: MutableMapping[str, Any], storage: Storage, comm: Comm, name: str
) -> tuple[str | None, BaseException | None]:
    """Try one checkpoint on every rank: (None, None) when all loaded it, else why not."""
    doc: Any = read_metadata(storage, name) if comm.rank == 0 else None
    doc, problem = comm.broadcast_object(doc)
    if problem is not None:
        return problem, None
    error: BaseException | None = None
    try:
        md, paths = decode_metadata(doc)
        sums = decode_checksums(doc)
        if sums is None:
            log.warning("checkpoint %s was saved before perdure recorded checksums: it is "
                        "restored unverified", name)
        restore(state, storage, name, md, paths, comm, sums)
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        error = exc
    reasons = comm.all_gather_object(None if error is None else _reason(error))
    failed = [(rank, r) for rank, r in enumerate(reasons) if r is not None]
    if not failed:
        return None, None
    if len(failed) == comm.world == 1:
        return failed[0][1], error
    # Ranks that failed only because another did say so in their own text: show the cause.
    cause = [(rank, r) for rank, r in failed if "abandoned" not in r] or failed
    return "; ".join(f"rank {rank}: {r}" for rank, r in cause), error


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, CheckpointError) else describe(exc)


def _all_failed(storage: Storage, failed: list[str], newest: BaseException | None
                ) -> CheckpointError:
    """The error of a restore that found no loadable checkpoint, with the newest one's class
    (a state that does not fit stays a CheckpointMismatchError)."""
    kind = type(newest) if isinstance(newest, CheckpointError) else CheckpointError
    if len(failed) == 1:
        return kind(failed[0].split(": ", 1)[1])
    return kind(f"no checkpoint in {storage.url} could be restored (newest first): "
                + "; ".join(failed))
