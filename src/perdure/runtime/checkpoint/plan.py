"""A save's state made ready on the training thread, and which rank writes what: DCP's planner,
run once per layout and reused.

Every rank sends its local plan to every other and then runs DCP's deduplication and builds
the global metadata itself, so no second collective is needed. The plan is cached under a
signature of the layout: a later save with the same layout plans nothing.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import (
    create_default_global_save_plan,
    create_default_local_save_plan,
)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, WriteItem
from torch.distributed.tensor import DTensor

from perdure.runtime.checkpoint import state as st
from perdure.runtime.checkpoint import values
from perdure.runtime.checkpoint.comm import Comm
from perdure.runtime.checkpoint.errors import UnsupportedValueError
from perdure.runtime.checkpoint.metadata import Path, dcp_path
from perdure.runtime.checkpoint.tree import flatten
from perdure.runtime.compat import dedup_save_plans

# Replicated items of at most this many bytes in all are written by one rank: below it a
# file's fixed cost outweighs writing in parallel, and a replica that writes nothing pays nothing.
SINGLE_WRITER_BYTES = 1 << 20

Signature = tuple[tuple[Any, ...], ...]
"""A state's layout: per leaf its key, kind, dtype, shapes (and shards) and path."""


@dataclass(frozen=True)
class Plan:
    """This rank's write items and the checkpoint's global layout (without file locations)."""

    signature: Signature
    items: list[WriteItem]
    metadata: Metadata
    paths: dict[str, Path]
    token: str


def leaf_signature(fqn: str, value: Any, path: Path) -> tuple[Any, ...]:
    """One leaf's part of a signature. No side effects."""
    if type(value) is torch.Tensor:  # the usual leaves first
        return (fqn, "t", value.dtype, value.shape, path)
    if not isinstance(value, torch.Tensor):
        return (fqn, "b", path)
    if isinstance(value, DTensor):
        local = value.to_local()
        return (fqn, "d", value.dtype, value.shape, local.shape, str(value.placements),
                tuple(value.device_mesh.mesh.flatten().tolist()), path)
    return (fqn, "t", value.dtype, value.shape, path)


@dataclass(frozen=True)
class Prepared:
    """One rank's state flattened for a save, with its layout's signature."""

    flat: dict[str, Any]
    paths: dict[str, Path]
    signature: Signature


def prepare(state: Mapping[str, Any], rank: int) -> tuple[Prepared | None, BaseException | None]:
    """``state`` ready to stage, or why not (returned: every rank must still vote)."""
    try:
        flat, paths = flatten(st.state_tree(st.check_state(state), rank))
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
        return Prepared(flat, paths, tuple(parts)), None
    except Exception as exc:
        return None, exc


def make_plan(
    flat: dict[str, Any], paths: dict[str, Path], sig: Signature, token: str, comm: Comm
) -> Plan:
    """Plan a save of ``flat`` with every other rank (collective on the checkpoint group)."""
    local = create_default_local_save_plan(flat, comm.rank == 0)
    gathered = comm.all_gather_object((local, paths, token))
    all_paths: dict[str, Path] = {}
    for _, rank_paths, _ in gathered:
        all_paths.update(rank_paths)
    plans = [g[0] for g in gathered]
    deduped = dedup_save_plans(plans, save_to_lowest_rank=_replicated_bytes(plans)
                               <= SINGLE_WRITER_BYTES)
    global_plans, md = create_default_global_save_plan(deduped)
    md = dataclasses.replace(
        md, planner_data={fqn: dcp_path(p) for fqn, p in all_paths.items()}
    )
    return Plan(sig, list(global_plans[comm.rank].items), md, all_paths, gathered[0][2])


def _replicated_bytes(plans: list[SavePlan]) -> int:
    """The size of the items that several plans hold (a plain value: 1). No side effects."""
    items = [item for plan in plans for item in plan.items]
    holders = Counter(item.index for item in items)
    sizes = {item.index: item.tensor_storage_size() or 1 for item in items}
    return sum(sizes[index] for index, n in holders.items() if n > 1)
