"""`checkpoint.every: auto`: the checkpoint interval from data, by Young/Daly.

No side effects: measurements in, an interval out.

    interval = sqrt(2 C M) x (1 + sqrt(C / 2M) / 3 + C / 18M) - C   (M when C >= 2M),
               clamped to [C, max_interval_seconds]

- C: the median blocking cost of the last saves (DEFAULT_COST_SECONDS before one).
- MTBF, in two Gamma-Poisson steps, each adding failures (restarts, retries) and running time
  to a prior worth one failure: cluster = (prior + its seconds) / (1 + its failures), then
  job = (cluster + its seconds) / (1 + its failures).
- M = MTBF / share: only failures the persistent checkpoint recovers count (a restore from a
  snapshot lost only the work since the snapshot); share = (replicas + restores from the
  checkpoint) / (replicas + restores reported), a prior worth one whole-job recovery.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

PRIOR_MTBF_SECONDS = 24 * 3600.0
DEFAULT_COST_SECONDS = 1.0
COSTS_KEPT = 20
CHANGE_FRACTION = 0.1
# Where a replica's restore came from, as the runtime's `restore` records say it (the words
# of perdure.runtime.goodput's FROM_ constants; a unit test holds the two lists together)
CHECKPOINT = "checkpoint"
SNAPSHOT_LOCAL = "snapshot-local"  # a node-local file ($PERDURE_NODE_DIR, /dev/shm)
SNAPSHOT_PEER = "snapshot-peer"  # a peer replica's memory
SNAPSHOT_MEMORY = "snapshot-memory"  # the process's own memory (an elastic survivor)
SNAPSHOT_SOURCES = (SNAPSHOT_LOCAL, SNAPSHOT_PEER, SNAPSHOT_MEMORY)
SCRATCH = "scratch"


@dataclass(frozen=True)
class Interval:
    """A chosen interval with its inputs, as `describe` shows it."""

    seconds: float
    cost: float
    cost_measured: int  # saves C was measured over (0: the default)
    mtbf: float
    job_failures: int
    job_seconds: float
    cluster_failures: int
    cluster_seconds: float
    prior: float = PRIOR_MTBF_SECONDS
    failure_mtbf: float = 0.0  # between failures of any kind (mtbf: of checkpoint restores)
    restores: int = 0  # restores whose source the replicas reported
    from_checkpoint: int = 0  # of those, from the persistent checkpoint
    share: float = 1.0  # of failures the checkpoint recovers (with its prior)

    def explain(self) -> str:
        c = (f"C {self.cost:.2f}s (median of {self.cost_measured} saves)" if self.cost_measured
             else f"C {self.cost:.2f}s (default: no save measured yet)")
        text = (f"every {self.seconds:.1f}s = Young/Daly(C, MTBF): {c}, MTBF {self.mtbf:.0f}s "
                f"(job: {self.job_failures} failures in {self.job_seconds:.0f}s running; "
                f"cluster: {self.cluster_failures} in {self.cluster_seconds:.0f}s; prior "
                f"{self.prior:.0f}s)")
        if not self.restores:
            return text
        return (f"{text}; of checkpoint restores: {self.failure_mtbf:.0f}s between failures / "
                f"share {self.share:.3f} ({self.from_checkpoint} of {self.restores} replica "
                f"restores from the checkpoint, the others from snapshots)")

    def to_json(self) -> dict[str, float | int]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "prior"}


def young_daly(cost: float, mtbf: float, ceiling: float) -> float:
    """Daly's higher-order optimum, never below the save's own cost nor above `ceiling`."""
    if cost >= 2.0 * mtbf:
        return min(ceiling, max(cost, mtbf))
    r = cost / (2.0 * mtbf)
    t = math.sqrt(2.0 * cost * mtbf) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - cost
    return min(ceiling, max(cost, t))


def mtbf(job_failures: int, job_seconds: float, cluster_failures: int,
         cluster_seconds: float, prior: float = PRIOR_MTBF_SECONDS) -> float:
    cluster = (prior + cluster_seconds) / (1 + cluster_failures)
    return (cluster + job_seconds) / (1 + job_failures)


@dataclass
class JobRecord:
    """What the controller has seen of one job: save costs, failures, running time."""

    costs: list[float] = field(default_factory=list)
    failures: int = 0
    seconds: float = 0.0
    published: Interval | None = None
    replicas: int = 1  # a recovery of the whole job reports this many restores
    restores: int = 0  # restores with a known source (reached_checkpoint not None)
    from_checkpoint: int = 0


@dataclass
class Cluster:
    failures: int = 0
    seconds: float = 0.0
    prior: float = PRIOR_MTBF_SECONDS  # the shell may set another ($PERDURE_MTBF_PRIOR_SECONDS)


def note_cost(rec: JobRecord, seconds: float) -> None:
    rec.costs.append(seconds)
    del rec.costs[:-COSTS_KEPT]


def reached_checkpoint(source: object) -> bool | None:
    """Whether a restore from `source` fell back to the persistent checkpoint (True), came
    from a snapshot (False), or says nothing of a failure (None: scratch, an unknown word)."""
    if source == CHECKPOINT:
        return True
    if source in SNAPSHOT_SOURCES:
        return False
    return None


def note_restore(rec: JobRecord, source: object) -> None:
    """A replica of the job restored from `source` (the runtime's word)."""
    reached = reached_checkpoint(source)
    if reached is not None:
        rec.restores += 1
        rec.from_checkpoint += reached


def checkpoint_share(rec: JobRecord) -> float:
    """The share of failures that the persistent checkpoint recovers, with its prior."""
    prior = max(1, rec.replicas)
    return (prior + rec.from_checkpoint) / (prior + rec.restores)


def choose(rec: JobRecord, cluster: Cluster, ceiling: float) -> Interval:
    cost = statistics.median(rec.costs) if rec.costs else DEFAULT_COST_SECONDS
    m = mtbf(rec.failures, rec.seconds, cluster.failures, cluster.seconds, cluster.prior)
    share = checkpoint_share(rec)
    return Interval(young_daly(cost, m / share, ceiling), cost, len(rec.costs), m / share,
                    rec.failures, rec.seconds, cluster.failures, cluster.seconds, cluster.prior,
                    m, rec.restores, rec.from_checkpoint, share)


def changed(old: Interval | None, new: Interval) -> bool:
    """Whether `new` is worth publishing: the first, or a move of more than CHANGE_FRACTION."""
    return old is None or abs(new.seconds - old.seconds) > CHANGE_FRACTION * old.seconds
