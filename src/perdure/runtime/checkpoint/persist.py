"""Persist one staged save: each rank writes its shard, rank 0 commits once every shard is
durable and applies retention, and every rank learns the same outcome.

Every rank reaches the gather even after a local failure, so that an error on one rank fails
the save on all of them instead of leaving the others waiting.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.storage import WriteResult

from perdure.runtime import compat
from perdure.runtime.checkpoint import checksum, commit, modes
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.errors import CheckpointError, CheckpointStorageError
from perdure.runtime.checkpoint.metadata import Path as KeyPath
from perdure.runtime.checkpoint.metadata import dcp_document, json_document
from perdure.runtime.checkpoint.procwriter import WriterProcess
from perdure.runtime.checkpoint.staging import (
    HostBuffers,
    Pending,
    StagedItem,
    StepGate,
    copy_pending,
)
from perdure.runtime.checkpoint.storage import Storage
from perdure.runtime.checkpoint.writer import shard_name, write_payloads

log = logging.getLogger("perdure.checkpoint")


@dataclass
class SaveJob:
    """Everything the background needs for one save; the staged items are its own copy."""

    step: int
    dir_name: str
    staged: list[StagedItem]
    buffers: HostBuffers
    metadata: Metadata  # the plan's, without storage locations
    paths: dict[str, KeyPath]
    world: int
    pending: list[Pending] = field(default_factory=list)  # copies staging left to us
    gate: StepGate | None = None  # opened once the pending copies are done
    copied: bool = False
    problem: str | None = None  # why the pending copies failed


@dataclass
class Shard:
    """One rank's outcome of writing its shard, as rank 0 gathers it (error: why it failed)."""

    error: str | None
    results: list[WriteResult] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    crcs: dict[str, int] = field(default_factory=dict)  # file -> checksum of the whole file
    item_crcs: list[int] = field(default_factory=list)  # one per result
    dir_name: str = ""
    storage: bool = False  # the error came from the storage, not from the state


@dataclass
class SaveStats:
    """What one save cost on this rank.

    blocked_s: time save() held training (the staging copy included, a wait for the previous
    save not: extra["waited_s"]), plus, once the save is finished, the optimizer's wait for
    deferred copies (extra["step_wait_s"]).
    persist_s: from the start of writing until every rank knew the save was committed.
    extra: stage_s, deferred_s, write_s, gathered_s, waited_s, step_wait_s; on rank 0 also
    commit_s, committed_s and retain_s; CPU seconds: save_cpu_s, write_cpu_s, persist_cpu_s and
    on rank 0 commit_cpu_s.
    """

    step: int
    blocked_s: float = 0.0
    persist_s: float = 0.0
    bytes_written: int = 0
    name: str | None = None
    extra: dict[str, float] = field(default_factory=dict)


ENV_STAGING = "PERDURE_STAGING_DIR"


def staging_base(storage: Storage, given: str | os.PathLike[str] | None) -> Path | None:
    """``given``, else None for a local directory (written in place), else
    $PERDURE_STAGING_DIR or the system temp dir."""
    if given is not None:
        return Path(given).expanduser().absolute()
    if storage.local_path("") is not None:
        return None
    base = os.environ.get(ENV_STAGING) or tempfile.gettempdir()
    # /tmp is shared: a directory of this user's alone (another user could have made the name)
    return modes.private_dir(Path(base) / f"perdure-staging-{os.getuid()}",
                             "the checkpoint staging dir")


def rank_staging(base: Path, url: str, rank: int) -> Path:
    """This rank's own staging directory under ``base`` (by URL, job, attempt and rank: ranks
    and jobs sharing a host never touch each other's files). No side effects."""
    job = os.environ.get("PERDURE_JOB_ID") or "nojob"
    attempt = os.environ.get("PERDURE_ATTEMPT") or "0"
    where = hashlib.blake2b(url.encode(), digest_size=4).hexdigest()
    return base / f"{job}-a{attempt}-{where}-rank{rank}"


@dataclass
class Persister:
    """Writes, gathers and commits saves for one Checkpointer."""

    storage: Storage
    comm: Comm
    keep: int | None
    staging_dir: Path | None
    writer: WriterProcess | None

    def run(self, job: SaveJob, stats: SaveStats) -> str:
        """Persist ``job``; returns the committed directory name or raises CheckpointError."""
        start, cpu = time.perf_counter(), time.thread_time()
        if not job.copied:
            self.stage_pending(job, stats)
        problem = job.problem
        if not self.storage.atomic_rename:
            self._clear_in_place(job.dir_name, job.step)
        mine = self._write_local(job) if problem is None else Shard(problem)
        stats.extra["write_s"] = time.perf_counter() - start
        stats.extra["write_cpu_s"] = time.thread_time() - cpu
        if mine.error is None:
            stats.bytes_written = sum(mine.sizes.values())
        outcomes = self.comm.gather_object(mine)
        stats.extra["gathered_s"] = time.perf_counter() - start
        verdict: tuple[str, str] | None = None
        if outcomes is not None:  # rank 0
            decided = time.thread_time()
            verdict = self._decide(job, outcomes, stats, start)
            stats.extra["commit_cpu_s"] = time.thread_time() - decided
        verdict = self.comm.broadcast_object(verdict)
        stats.persist_s = time.perf_counter() - start
        stats.extra["persist_cpu_s"] = time.thread_time() - cpu
        if verdict[0] != "ok":
            kind = CheckpointStorageError if verdict[0] == "storage" else CheckpointError
            raise kind(f"save of step {job.step} to {self.storage.url} failed: {verdict[1]}")
        stats.name = str(verdict[1])
        return stats.name

    def stage_pending(self, job: SaveJob, stats: SaveStats) -> None:
        """Make the copies staging deferred, then let the optimizers step."""
        start = time.perf_counter()
        try:
            copy_pending(job.pending)
        except Exception as exc:
            log.error("rank %d: %s", self.comm.rank, exc)
            job.problem = f"rank {self.comm.rank}: {exc}"
        finally:
            job.copied = True
            if job.gate is not None:
                job.gate.open()
            stats.extra["deferred_s"] = time.perf_counter() - start

    def _retain(self, current: str, stats: SaveStats) -> None:
        # Before the other ranks hear of the commit, so that no rank's next save (whose
        # directory would look like a leftover) starts meanwhile; a failure here is no failure
        # of the save.
        start = time.perf_counter()
        try:
            removed = commit.retain(self.storage, self.keep, current)
        except Exception:
            log.exception("checkpoint retention in %s failed; will retry after the next save",
                          self.storage.url)
            return
        stats.extra["retain_s"] = time.perf_counter() - start
        if removed:
            log.info("checkpoint retention removed %s", ", ".join(removed))

    def _clear_in_place(self, name: str, step: int) -> None:
        # Without rename a save writes in place: drop an earlier save of the same step there
        # (marker first) before any rank writes.
        problem = None
        if self.comm.rank == 0:
            try:
                if name in self.storage.list_names():
                    self.storage.remove_tree(f"{name}/{commit.MARKER}")
                    self.storage.remove_tree(name)
            except Exception as exc:
                problem = f"rank 0 could not clear {name}: {type(exc).__name__}: {exc}"
        problem = self.comm.broadcast_object(problem)
        if problem is not None:
            raise CheckpointStorageError(f"save of step {step} to {self.storage.url} failed: "
                                         f"{problem}")

    def _write_local(self, job: SaveJob) -> Shard:
        file = shard_name(self.comm.rank)
        try:
            if not job.staged:  # none of the plan's items is this rank's: no file
                if self.comm.rank == 0:
                    self.storage.makedirs(job.dir_name)  # where the commit writes
                return Shard(None, dir_name=job.dir_name)
            target = self.storage.local_path(f"{job.dir_name}/{file}")
            if self.staging_dir is None:  # a local directory (staging_base)
                assert target is not None
                self.storage.makedirs(job.dir_name)
                shard = self._write(job, target, file, fsync=True)
            else:
                mine = rank_staging(self.staging_dir, self.storage.url, self.comm.rank)
                local_dir = mine / job.dir_name
                modes.make_dirs(local_dir)
                try:
                    shard = self._write(job, local_dir / file, file, fsync=False)
                    self.storage.makedirs(job.dir_name)
                    self.storage.put_file(local_dir / file, f"{job.dir_name}/{file}")
                finally:
                    shutil.rmtree(local_dir, ignore_errors=True)
                    with contextlib.suppress(OSError):  # another save of this rank may use it
                        mine.rmdir()
            return shard
        except Exception as exc:  # reported to every rank through the gather
            log.exception("rank %d failed to write its shard of step %d", self.comm.rank, job.step)
            return Shard(f"rank {self.comm.rank}: {type(exc).__name__}: {exc}", storage=True)

    def _write(self, job: SaveJob, path: Path, file: str, *, fsync: bool) -> Shard:
        algorithm = checksum.ALGORITHM
        if self.writer is not None:
            written = self.writer.write(job.buffers, path, job.staged, fsync=fsync,
                                        algorithm=algorithm)
        else:
            payloads = [e.data if e.data is not None else e.tensor for e in job.staged]
            written = write_payloads(path, payloads, fsync=fsync,  # type: ignore[arg-type]
                                     algorithm=algorithm)
        results = [
            WriteResult(e.item.index, length, compat.storage_info(file, start, length))
            for e, (start, length, _) in zip(job.staged, written.spans, strict=True)
        ]
        return Shard(None, results, {file: written.size}, {file: written.crc},
                     [crc for _, _, crc in written.spans], job.dir_name)

    def _decide(
        self, job: SaveJob, outcomes: list[Shard], stats: SaveStats, start: float
    ) -> tuple[str, str]:
        errors = [o.error for o in outcomes if o.error is not None]
        # A failure of the storage only (not of some rank's state): what callers may survive.
        kind = "storage" if all(o.storage for o in outcomes if o.error is not None) else "error"
        dirs = {o.dir_name for o in outcomes if o.error is None}
        if not errors and dirs != {job.dir_name}:
            errors.append(f"the ranks wrote to different directories {sorted(dirs)}")
            kind = "error"
        if errors:
            with contextlib.suppress(Exception):  # leftovers are removed by a later retention
                self.storage.remove_tree(job.dir_name)
            return (kind, "; ".join(errors))
        try:
            name = self._commit(job, outcomes, stats)
        except Exception as exc:
            log.exception("rank 0 failed to commit step %d", job.step)
            return ("storage", f"rank 0 could not commit: {type(exc).__name__}: {exc}")
        stats.extra["committed_s"] = time.perf_counter() - start
        self._retain(name, stats)
        return ("ok", name)

    def _commit(self, job: SaveJob, outcomes: list[Shard], stats: SaveStats) -> str:
        start = time.perf_counter()
        files: dict[str, int] = {}
        crcs: dict[str, int] = {}
        item_crcs: list[int] = []
        results: list[WriteResult] = []
        for o in outcomes:
            files.update(o.sizes)
            crcs.update(o.crcs)
            results += o.results
            item_crcs += o.item_crcs
        # DCP's own format, for stock readers; perdure reads the JSON
        dcp_md = dcp_document(job.metadata, results)
        algorithm = checksum.ALGORITHM
        doc = json_document(job.metadata, job.paths, results, item_crcs, algorithm)
        for name, data in ((commit.DCP_METADATA, dcp_md), (commit.METADATA_JSON, doc)):
            self.storage.write_bytes(f"{job.dir_name}/{name}", data)
            files[name] = len(data)
            crcs[name] = checksum.update(algorithm, 0, data)
        wrong = commit.size_mismatch(self.storage, job.dir_name, files)
        if wrong is not None:
            raise CheckpointError(f"{job.dir_name}/{wrong[0]} has {wrong[1]} bytes, not "
                                  f"{wrong[2]}")
        marker = commit.marker_doc(job.step, job.world, files, (algorithm, crcs))
        name = commit.publish(self.storage, job.dir_name, job.step, marker)
        stats.extra["commit_s"] = time.perf_counter() - start
        return name
