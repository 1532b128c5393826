"""perdure for Lightning: `PerdureCallback` in the callbacks, `PerdureCheckpointIO` in plugins.

    io = PerdureCheckpointIO()                  # $PERDURE_CHECKPOINT_DIR, else ./checkpoints
    trainer = L.Trainer(callbacks=[PerdureCallback()], plugins=[io], ...)
    trainer.fit(model, ckpt_path=io.latest())   # None on the first run

PerdureCheckpointIO saves through perdure's Checkpointer (async, atomic, checksummed); the
`.ckpt` path Lightning names holds a pointer to the step, then the whole checkpoint once that
step is committed (lightning_files). PerdureCallback reports progress and turns a preemption
notice into an agreed save and an exit "suspended". Over perdure's `ElasticLoader` a mid-epoch
resume is exact on any number of replicas (docs/guides/lightning.md).
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import CombinedLoader

import perdure
from perdure.integrations import lightning_files as files
from perdure.runtime import Checkpointer, ElasticLoader, StopVote, goodput, rng_state, set_rng_state

__all__ = ["PerdureCallback", "PerdureCheckpointIO"]

RNG_KEY = "perdure_rng"  # every rank's RNG state, in the checkpoint
# Lightning 2.6's TorchCheckpointIO.load_checkpoint takes weights_only; 2.4's does not (torch's
# default applies: the whole checkpoints PerdureCheckpointIO writes load either way).
LOAD_TAKES_WEIGHTS_ONLY = "weights_only" in inspect.signature(
    TorchCheckpointIO.load_checkpoint).parameters


class PerdureCheckpointIO(CheckpointIO):  # type: ignore[misc]
    """Lightning checkpoints through perdure's Checkpointer (docs/guides/lightning.md).

    url: where the checkpoints go (default: $PERDURE_CHECKPOINT_DIR, else ./checkpoints).
    keep: committed checkpoints kept.
    """

    def __init__(self, url: str | os.PathLike[str] | None = None, keep: int = 3) -> None:
        self.url = str(url or os.environ.get("PERDURE_CHECKPOINT_DIR") or "checkpoints")
        self.keep = keep
        self._ckpt: Checkpointer | None = None
        self._saved: int | None = None
        self._files = files.PortableWriter(self.url)
        self._unsettled: list[tuple[int, str]] = []  # names whose step may still be saving

    def checkpointer(self) -> Checkpointer:
        # Lightning's DDP writes on rank 0 only (the state is replicated), and every rank
        # reads: no collective.
        if self._ckpt is None:
            self._ckpt = Checkpointer(self.url, keep=self.keep, alone=True)
        return self._ckpt

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any,
                        storage_options: Any | None = None) -> None:
        step = int(checkpoint["global_step"])
        if step != self._saved:  # ModelCheckpoint may save one step under two names
            state = {"skeleton": json.dumps(files.skeleton(checkpoint)),
                     "lightning": checkpoint}
            self.checkpointer().save(step, state)  # after the previous save has ended
            self._saved = step
            self._settle(before=step)
        path = str(path)
        files.write_pointer(path, step)
        self._unsettled.append((step, path))

    def load_checkpoint(self, path: Any, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint at `path`: a whole one as it is; a pointer's step, if committed, else
        the newest committed one before it (a save that never finished is never loaded, and is
        named in the job's events)."""
        path = str(path)
        try:
            wanted = files.read_pointer(path)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path}: no such checkpoint; resume with ckpt_path=PerdureCheckpointIO.latest() "
                "(None when there is none)") from None
        if wanted is None:
            return _torch_load(path, map_location, weights_only)
        ckpt = self.checkpointer()
        committed = [s for s in ckpt.steps() if s <= wanted]
        if not committed:
            raise FileNotFoundError(
                f"{path}: no committed perdure checkpoint at or before step {wanted} in "
                f"{self.url}; start without ckpt_path (PerdureCheckpointIO.latest() gives "
                "None when there is none).")
        step = committed[-1]
        if step != wanted:
            _note(f"checkpoint step {wanted} ({path}) was never committed: loading step {step}")
        loaded = files.load_step(ckpt, step)
        if ckpt.skipped_partial:
            skipped = "; ".join(ckpt.skipped_partial)
            _note(f"skipped checkpoints a replica never finished: {skipped}")
        return loaded

    def remove_checkpoint(self, path: Any) -> None:
        """Lightning's retention removes the name; the Checkpointer keeps the last `keep`."""
        path = str(path)
        self._unsettled = [(s, p) for s, p in self._unsettled if p != path]
        self._files.remove(path)

    def latest(self) -> str | None:
        """A pointer to the newest committed checkpoint, for `fit(ckpt_path=...)`; None when
        there is none."""
        steps = self.checkpointer().steps()
        if not steps:
            return None
        path = files.join(self.url, f"latest-rank{_rank()}.pointer")
        files.write_pointer(path, steps[-1])
        return path

    def wait(self) -> None:
        """Until the last save is committed (raises its error, if it failed)."""
        if self._ckpt is not None:
            self._ckpt.wait()
            self._settle(before=None)

    def teardown(self) -> None:
        """Until the last save is committed and every name holds its whole checkpoint."""
        self.wait()
        self._files.wait()

    def _settle(self, before: int | None) -> None:
        """Hand the names of the saves that have ended (every step before `before`; None:
        all) to the writer of whole checkpoints."""
        ended = [(s, p) for s, p in self._unsettled if before is None or s < before]
        self._unsettled = [(s, p) for s, p in self._unsettled if (s, p) not in ended]
        for step, path in ended:
            self._files.submit(step, path)


class PerdureCallback(Callback):  # type: ignore[misc]
    """Progress to perdure; a preemption notice -> save -> exit suspended (see
    docs/guides/lightning.md)."""

    def __init__(self, *, vote_within: float = 0.5) -> None:
        self.ctx = perdure.init()
        self._on_notice = signal.getsignal(signal.SIGTERM)  # perdure's preemption handler
        self.vote = StopVote(within=vote_within)
        self._mark: float | None = None
        self._positions: list[dict[str, Any]] | None = None  # ElasticLoader states to restore
        self._saved_on_notice: int | None = None  # the step saved on a preemption notice

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Lightning installs its own SIGTERM handler when fit starts (it ends the run at once):
        # a notice must reach perdure's, which lets the ranks agree, save and exit suspended.
        if callable(self._on_notice) and \
                threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_notice)
        goodput.checkpoint_restored(trainer.global_step or None, 0.0)
        if self._positions is not None:
            _restore_positions(trainer, self._positions)
            self._positions = None
        self._mark = time.perf_counter()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Runs before Lightning makes the epoch's iterator (after the first epoch's: that one
        # is already the loader's epoch, which set_epoch leaves as it is).
        for loader in _train_loaders(trainer):
            if isinstance(loader, ElasticLoader) and loader.over_shards and \
                    loader.epoch != trainer.current_epoch:
                loader.set_epoch(trainer.current_epoch)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
        goodput.reporter().step(trainer.global_step, now - (self._mark or now))
        self._mark = now
        if self._saved_on_notice is None and self.vote.poll(self.ctx.should_stop):
            self._save(trainer)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # Exit before the step after the one saved: every hook of the saved step (the
        # module's on_train_batch_end runs after the callbacks') has run by now.
        if self._saved_on_notice is not None:
            self._exit_suspended(trainer)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Every rank's RNG state (dropout draws differ by rank), gathered into the one
        checkpoint Lightning writes. Called on every rank, as Lightning's save is."""
        checkpoint[RNG_KEY] = _gather(rng_state())
        _hold_back_read_ahead(trainer, checkpoint)

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        # Lightning would restore the loaders before it takes the epoch's length from them;
        # on_train_start restores them instead (see _restore_positions).
        self._positions = _take_positions(checkpoint)
        states = checkpoint.get(RNG_KEY)
        # On another world size there is no state of this rank to continue: the data order
        # stays exact (ElasticLoader), the draws are new.
        if states is not None and len(states) == trainer.world_size:
            set_rng_state(states[trainer.global_rank])

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.vote.close()
        goodput.flush()

    def _save(self, trainer: Trainer) -> None:
        io = trainer.strategy.checkpoint_io
        root = io.url if isinstance(io, PerdureCheckpointIO) else trainer.default_root_dir
        path = files.join(str(root), f"preempted-step{trainer.global_step}.ckpt")
        trainer.save_checkpoint(path)  # every rank: Lightning's collective save
        if isinstance(io, PerdureCheckpointIO):
            io.wait()
        self._saved_on_notice = trainer.global_step

    def _exit_suspended(self, trainer: Trainer) -> None:
        self.vote.close()
        trainer.strategy.barrier("perdure-preempted")
        print(f"perdure: preemption notice: saved step {self._saved_on_notice}; exiting "
              "suspended", flush=True)
        self.ctx.exit_suspended()


def _take_positions(checkpoint: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The train loaders' states, taken out of the checkpoint Lightning restores its loops
    from, when every one is an ElasticLoader's over an ElasticSampler; else None (Lightning
    restores them itself)."""
    fit = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
    states = fit.get("combined_loader") or []
    if not states or not all(isinstance(s, dict) and {"cursor", "num_samples"} <= set(s)
                             for s in states):
        return None
    fit["combined_loader"] = []
    return list(states)


def _train_loaders(trainer: Trainer) -> list[Any]:
    """The train dataloaders whose state Lightning keeps, in its checkpoint's order."""
    if trainer.train_dataloader is None:
        return []
    return [dl for dl in CombinedLoader(trainer.train_dataloader).flattened
            if hasattr(dl, "state_dict") and hasattr(dl, "load_state_dict")]


def _hold_back_read_ahead(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Over a loader without a length Lightning's fetcher holds the next batch(es) already:
    the saved positions are put back before them (the resume trains them)."""
    fetched = getattr(getattr(trainer.fit_loop, "_data_fetcher", None), "batches", None)
    held = len(fetched) if isinstance(fetched, list) else 0
    fit = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
    states = fit.get("combined_loader")
    loaders = _train_loaders(trainer)
    if not held or not isinstance(states, list) or len(states) != len(loaders):
        return
    for i, loader in enumerate(loaders):
        if isinstance(loader, ElasticLoader) and loader.over_shards:
            states[i] = loader.state_dict(held_back=held)


def _restore_positions(trainer: Trainer, states: list[dict[str, Any]]) -> None:
    """Restore the train loaders (after Lightning made its iterator, before it advances it)
    and count the epoch's batches in this world size's steps: the whole epoch, Lightning's
    length, less the steps left from the restored position."""
    loaders = _train_loaders(trainer)
    if len(loaders) != len(states) or not all(isinstance(dl, ElasticLoader) for dl in loaders):
        raise RuntimeError(
            f"the checkpoint holds {len(states)} ElasticLoader positions but the train "
            f"dataloaders are {[type(dl).__name__ for dl in loaders]}: return the same "
            "dataloaders from train_dataloader() as the run that saved it")
    behind = 0
    for loader, state in zip(loaders, states, strict=True):
        whole = loader.sampler.steps_left(0)  # the epoch at this world size
        loader.load_state_dict(state)
        behind = max(behind, whole - len(loader))
    progress = trainer.fit_loop.epoch_loop.batch_progress.current
    shift = behind - progress.ready  # 0 on the world size that saved it
    for count in ("ready", "started", "processed", "completed"):  # each count Lightning keeps
        setattr(progress, count, getattr(progress, count) + shift)


def _gather(value: Any) -> list[Any]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _torch_load(path: str, map_location: Any, weights_only: bool | None) -> dict[str, Any]:
    """A whole checkpoint, read as Lightning's own CheckpointIO reads it."""
    torch_io = TorchCheckpointIO()
    kwargs: dict[str, Any] = {} if map_location is None else {"map_location": map_location}
    if LOAD_TAKES_WEIGHTS_ONLY:
        kwargs["weights_only"] = weights_only
    loaded: dict[str, Any] = torch_io.load_checkpoint(path, **kwargs)
    return loaded


def _note(message: str) -> None:
    print(f"perdure: {message}", file=sys.stderr, flush=True)
    if _rank() == 0:
        goodput.note(message)


def _rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)
