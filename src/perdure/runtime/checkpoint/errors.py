"""Errors a checkpoint raises; each names the thing, the value and what to do next."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A save or restore failed; the message says which step, which rank and why."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint does not fit the state it is restored into (a key or a shape differs)."""


class UnsupportedValueError(CheckpointError, TypeError):
    """A state value cannot be stored without pickling arbitrary objects."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint's bytes are not what its commit recorded (a checksum or a size differs)."""


class CheckpointStorageError(CheckpointError):
    """A save failed on the storage (a write, an upload, the commit), not on the state: the
    kind of failure a scheduled save reports and survives (Checkpointer ``on_failure``)."""
