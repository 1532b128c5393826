"""Spare nodes in a Slurm attempt's allocations: the nodes an attempt holds (`hold_nodes`) that
its allocations lack join the one not yet submitted, else a further allocation sized as the
attempt's others, so a lost node's replicas launch on one at once, no new queue wait.

No side effects: the allocations are submitted and given back by the backend.
"""

from __future__ import annotations

from collections.abc import Iterable

from perdure.backends.agents.alloc import Alloc


def extend(allocs: list[Alloc], key: tuple[str, str], nodes: Iterable[str]) -> None:
    """Make the allocations of attempt `key` (job, attempt) hold `nodes` as well."""
    mine = [a for a in allocs if (a.job_id, a.attempt) == key and not a.ending]
    new = [n for n in nodes if not any(n in a.nodes for a in mine)]
    if not new:
        return
    unsubmitted = next((a for a in mine if not a.slurm_id), None)
    if unsubmitted is not None:
        unsubmitted.nodes.extend(new)
        return
    like = mine[0] if mine else Alloc(*key, [])
    allocs.append(Alloc(*key, new, cpus=like.cpus, gpus=like.gpus, warning=like.warning))
