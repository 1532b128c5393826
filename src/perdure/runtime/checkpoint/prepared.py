"""A save's state made ready on the training thread: flattened, plain values encoded, its
layout's signature, and (when asked) what the background may copy after save() returns.

No side effects: reads the state (and its optimizers' storages).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from perdure.runtime.checkpoint import state as st
from perdure.runtime.checkpoint import values
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.errors import UnsupportedValueError
from perdure.runtime.checkpoint.metadata import Path as KeyPath
from perdure.runtime.checkpoint.plan import Signature, leaf_signature
from perdure.runtime.checkpoint.staging import optimizer_storages
from perdure.runtime.checkpoint.tree import Flattener


@dataclass
class Prepared:
    """One rank's state flattened for a save, with its layout's signature."""

    flat: dict[str, Any]
    paths: dict[str, KeyPath]
    signature: Signature
    state: Mapping[str, Any]
    deferred: bool  # what only the optimizers change may be staged in the background

    def optimizer_storages(self) -> tuple[list[torch.optim.Optimizer], frozenset[int]]:
        """The state's optimizers and the storages only they change (none unless deferred);
        looked up only for a plan whose copies may be worth deferring."""
        return optimizer_storages(self.state) if self.deferred else ([], frozenset())


@dataclass(frozen=True)
class Go:
    """A save that goes ahead: its step and what its launch needs to know."""

    step: int
    comm: Comm
    background: bool
    entered: float  # perf_counter() when save() was called
    tolerant: bool
    cpu: float  # the training thread's CPU time then


def prepare(state: Mapping[str, Any], rank: int, *, deferred: bool,
            flattener: Flattener) -> tuple[Prepared | None, BaseException | None]:
    """``state`` ready to stage, or why not (the error is returned: every rank must still
    vote). ``deferred``: the storages only an optimizer changes may be deferred;
    ``flattener``: the Checkpointer's memory of its state's layout."""
    try:
        tree = st.tree_for_save(st.check_state(state), rank)
        flat, paths = flattener.flatten(tree)
        parts = []  # the signature, made in the same pass
        for fqn, value in flat.items():
            kind = type(value)
            if kind in values.PLAIN:
                pass  # encoded as it is
            elif kind is not torch.Tensor and not isinstance(value, torch.Tensor):
                value = flat[fqn] = values.encode(value, fqn)  # never a tensor
            elif value.layout != torch.strided:
                raise UnsupportedValueError(
                    f"state value {fqn!r} is a {value.layout} tensor; only dense (strided) "
                    "tensors can be checkpointed. Convert it with .to_dense()."
                )
            parts.append(leaf_signature(fqn, value, paths[fqn]))
        return Prepared(flat, paths, tuple(parts), state, deferred), None
    except Exception as exc:
        return None, exc
