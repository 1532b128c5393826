"""Load a committed checkpoint into a user's state, in place, on any world size.

The state is first matched against the checkpoint's metadata, so that a wrong model fails with
the first mismatched key and both shapes instead of deep inside DCP.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import MutableMapping
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from perdure.runtime import compat
from perdure.runtime.checkpoint import state as st
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.errors import CheckpointError, CheckpointMismatchError
from perdure.runtime.checkpoint.metadata import Checksums, Path
from perdure.runtime.checkpoint.reader import SafeLoadPlanner, SafeReader, describe
from perdure.runtime.checkpoint.shared import dtype_name
from perdure.runtime.checkpoint.storage import Storage
from perdure.runtime.checkpoint.tree import flatten, unflatten

log = logging.getLogger("perdure.checkpoint")
_STRICT = (st.Kind.MODULE, st.Kind.OPTIMIZER, st.Kind.TENSOR)


def restore(
    state: MutableMapping[str, Any],
    storage: Storage,
    name: str,
    md: Metadata,
    paths: dict[str, Path],
    comm: Comm,
    checksums: Checksums | None = None,
) -> None:
    """Load checkpoint ``name`` into ``state`` (raises CheckpointMismatchError on a mismatch,
    CheckpointCorruptError when bytes differ from their ``checksums``, on every rank)."""
    by_key: dict[str, dict[str, Any]] = {}
    problem: Exception | None = None
    try:
        by_key = plan_load(state, comm.rank, name, md, paths)
    except Exception as exc:
        problem = exc
    failed = [rank for rank, ok in enumerate(comm.agree([int(problem is None)])) if not ok[0]]
    if problem is not None:
        raise problem
    if failed:
        raise CheckpointError(
            f"restore of {name} abandoned: rank(s) {failed} could not match their state to it "
            "(their own error says why); no rank loaded anything."
        )
    load = {fqn: target for fqns in by_key.values() for fqn, target in fqns.items()}
    planner = SafeLoadPlanner()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        try:
            compat.dcp_load(load, SafeReader(storage, name, md, checksums), planner,
                            comm.data_group, no_dist=not comm.distributed)
        except CheckpointException as exc:  # DCP's, with every rank's traceback in its text
            raise _plain(exc) from None
    for key, fqns in by_key.items():
        skey = st.stored_key(key, state[key], comm.rank)
        leaves = {fqn: planner.loaded[fqn] if target is None else target
                  for fqn, target in fqns.items()}
        nested = unflatten(leaves, {fqn: paths[fqn] for fqn in fqns})
        st.apply(state, key, nested[skey])


def _plain(exc: CheckpointException) -> CheckpointError:
    """The first rank's failure as one line (DCP's text is tracebacks and may advise
    weights_only=False, which a restore must never suggest)."""
    if not exc.failures:
        return CheckpointError(f"the load failed: {describe(exc)}")
    rank, (error, _) = min(exc.failures.items(), key=lambda kv: kv[0])
    if isinstance(error, CheckpointError):
        return type(error)(f"{error} (rank {rank})")
    return CheckpointError(f"rank {rank} failed to load: {describe(error)}")


def plan_load(
    state: MutableMapping[str, Any], rank: int, name: str, md: Metadata, paths: dict[str, Path]
) -> dict[str, dict[str, Any]]:
    """For each state key, the checkpoint keys to load and where (None: a plain value); a
    CheckpointMismatchError names the first key whose presence or shape differs."""
    saved = md.state_dict_metadata
    entries = {fqn: {"kind": "tensor" if isinstance(e, TensorStorageMetadata) else "bytes"}
               for fqn, e in saved.items()}
    targets, _ = flatten(st.state_tree(state, rank, entries))
    by_top: dict[str, list[str]] = {}
    for fqn in saved:
        by_top.setdefault(str(paths[fqn][0][1]), []).append(fqn)
    out: dict[str, dict[str, Any]] = {}
    for key, wrapped in state.items():
        skey = st.stored_key(key, wrapped, rank)
        if skey not in by_top:
            if isinstance(wrapped, st.RankLocal):
                log.info("checkpoint %s has no %s for rank %d; keeping its value", name, key, rank)
                continue
            raise CheckpointMismatchError(
                f"state key {key!r} is not in checkpoint {name}, which holds "
                f"{sorted(k for k in by_top if st.RANK_SUFFIX not in k)}; restore a state with "
                "the keys that were saved."
            )
        value = wrapped.value if isinstance(wrapped, st.RankLocal) else wrapped
        kind = st.kind_of(value)
        strict = kind in _STRICT
        mine = {f: t for f, t in targets.items() if f == skey or f.startswith(skey + ".")}
        if strict:
            # An optimizer keeps no state for parameters that never had a gradient: their
            # missing state is not a mismatch.
            optional = f"{skey}.state." if kind is st.Kind.OPTIMIZER else None
            _check_strict(name, mine, saved, optional)
        # Values and optimizer state the state has no tensor for yet are read into new ones.
        fixed = kind in (st.Kind.MODULE, st.Kind.TENSOR)
        out[key] = {fqn: _target(fqn, saved[fqn], mine.get(fqn), fixed, name, key)
                    for fqn in by_top[skey]}
    return out


def _check_strict(
    name: str, mine: dict[str, Any], saved: dict[str, Any], optional: str | None
) -> None:
    for fqn, target in mine.items():
        if not isinstance(target, torch.Tensor):
            continue
        entry = saved.get(fqn)
        if entry is None and optional is not None and fqn.startswith(optional):
            continue
        if entry is None:
            raise CheckpointMismatchError(
                f"checkpoint {name} does not match the state: {fqn!r} (shape "
                f"{tuple(target.shape)}) is in the state but not in the checkpoint; restore "
                "into the model that was saved."
            )
        if not isinstance(entry, TensorStorageMetadata):
            raise CheckpointMismatchError(
                f"checkpoint {name} does not match the state: {fqn!r} is a tensor in the "
                "state but a plain value in the checkpoint."
            )
        if tuple(entry.size) != tuple(target.shape):
            raise CheckpointMismatchError(
                f"checkpoint {name} does not match the state: {fqn!r} has shape "
                f"{tuple(entry.size)} in the checkpoint but {tuple(target.shape)} in the state; "
                "restore into the model that was saved."
            )


def _target(fqn: str, entry: Any, target: Any, fixed: bool, name: str, key: str) -> Any:
    if not isinstance(entry, TensorStorageMetadata):
        return None
    size = tuple(entry.size)
    if isinstance(target, torch.Tensor) and tuple(target.shape) == size:
        return target
    if fixed:
        raise CheckpointMismatchError(
            f"checkpoint {name} does not match the state: {fqn!r} (shape {size}, "
            f"{dtype_name(entry.properties.dtype)}) is in the checkpoint but the state's "
            f"{key!r} has no such tensor; restore into the model that was saved."
        )
    return torch.empty(size, dtype=entry.properties.dtype)
