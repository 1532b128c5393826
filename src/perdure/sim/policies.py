"""The recovery policies a simulation compares: what each changes in the spec and the backend.

No side effects. A policy is data: the core's decisions stay the core's; a policy only sets
the spec fields a user would set (checkpoint interval, watchdog) and the backend's facts
(warm standbys, spare nodes, snapshots).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from perdure.core.spec import JobSpec


@dataclass(frozen=True)
class Policy:
    name: str
    about: str
    # fixed seconds, "spec" (the job spec's own checkpoint interval) or "auto" (Young/Daly)
    interval: float | Literal["spec", "auto"]
    hangs: Literal["nccl", "watchdog"]  # what ends a hang: NCCL's timeout, perdure's watchdog
    warm: bool = False  # restarts on a node that ran the job start from a warm standby
    spares: int = 0  # the spec's `spares`: whole nodes held warm for a lost node's replicas
    snapshots: bool = False  # in-memory snapshots, node-local (they outlive the process)
    # ... and a copy in a peer's memory (the elastic Snapshotter's holder): they outlive a lost
    # node unless its peer (the runtime's `choose_peer`) is lost with it
    peers: bool = False
    # Quarantine nodes by the cluster file's default `health` rule (core/health.py); off:
    # a node is never fenced, however often it fails
    fencing: bool = False

    def apply(self, spec: JobSpec) -> JobSpec:
        """The spec this policy runs: its checkpoint interval, its hang detector."""
        ckpt = spec.checkpoint
        if self.interval == "auto":
            ckpt = ckpt.model_copy(update={"every": "auto", "every_seconds": None,
                                           "every_steps": None})
        elif isinstance(self.interval, float):
            ckpt = ckpt.model_copy(update={"every": None, "every_seconds": self.interval,
                                           "every_steps": None})
        pools = [p.model_copy(update={"spares": self.spares}) for p in spec.pools]
        return spec.model_copy(update={"checkpoint": ckpt, "pools": pools})


POLICIES = {
    p.name: p for p in (
        Policy("checkpoint-restart",
               "torchrun style: group restart, cold, from a persistent checkpoint every 3 h; "
               "a hang ends at NCCL's timeout (a job retry)",
               interval=3 * 3600.0, hangs="nccl"),
        Policy("perdure-default",
               "perdure as installed: the spec's interval, warm restarts in place, the "
               "watchdog ends hangs, replacements start cold",
               interval="spec", hangs="watchdog", warm=True),
        Policy("perdure-best",
               "auto interval (Young/Daly over the failures the checkpoint restores), "
               "node-local and peer snapshots (peer copies: the elastic runtime's "
               "Snapshotter), warm standbys, warm spare nodes, the watchdog, bad nodes "
               "quarantined (health: 2 failures in a week)",
               interval="auto", hangs="watchdog", warm=True, spares=2, snapshots=True,
               peers=True, fencing=True),
        Policy("perdure-best-unfenced",
               "perdure-best without quarantine: a node that keeps failing is used again "
               "each time it comes back",
               interval="auto", hangs="watchdog", warm=True, spares=2, snapshots=True,
               peers=True),
        Policy("perdure-node-snapshots",
               "perdure-best with node-local snapshots only (a group restart's "
               "resume.node_snapshotter): a lost node sends the group to the checkpoint",
               interval="auto", hangs="watchdog", warm=True, spares=2, snapshots=True),
    )
}


# What `perdure sim` compares unless --policy names others (perdure-node-snapshots on request)
DEFAULT = ("checkpoint-restart", "perdure-default", "perdure-best")


def by_names(names: list[str]) -> list[Policy]:
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ValueError(f"--policy: unknown {', '.join(unknown)}; choose from "
                         f"{', '.join(POLICIES)}")
    return [POLICIES[n] for n in names]
