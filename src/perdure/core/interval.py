"""`checkpoint.every: auto`: the checkpoint interval from data, by Young/Daly.

No side effects: measurements in, an interval out; the shell publishes it to the replicas.

    interval = sqrt(2 x C x MTBF), clamped to [C, max_interval_seconds]

- C: the blocking cost of one save (what training waits for), the median of the last saves the
  runtime reported; DEFAULT_COST_SECONDS until the first is measured.
- MTBF of the job (PRIOR_MTBF_SECONDS, or $PERDURE_MTBF_PRIOR_SECONDS for the controller),
  estimated in two Gamma-Poisson steps, each adding observed failures and
  running time to a prior worth one failure:
    cluster MTBF = (PRIOR_MTBF_SECONDS + the cluster's running time) / (1 + its failures)
    job MTBF     = (cluster MTBF + the job's running time) / (1 + the job's failures)
  so a new job starts from what the cluster has seen (or the prior, one failure a day) and
  moves to its own record as it accumulates failures.
- A failure: a replica restart or a job retry (a preemption with its save loses nothing).
- A new interval is published when it moves by more than CHANGE_FRACTION.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

PRIOR_MTBF_SECONDS = 24 * 3600.0
DEFAULT_COST_SECONDS = 1.0
COSTS_KEPT = 20
CHANGE_FRACTION = 0.1


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

    def explain(self) -> str:
        c = (f"C {self.cost:.2f}s (median of {self.cost_measured} saves)" if self.cost_measured
             else f"C {self.cost:.2f}s (default: no save measured yet)")
        return (f"every {self.seconds:.1f}s = sqrt(2 x C x MTBF): {c}, MTBF {self.mtbf:.0f}s "
                f"(job: {self.job_failures} failures in {self.job_seconds:.0f}s running; "
                f"cluster: {self.cluster_failures} in {self.cluster_seconds:.0f}s; prior "
                f"{self.prior:.0f}s)")

    def to_json(self) -> dict[str, float | int]:
        return {"seconds": self.seconds, "cost": self.cost, "cost_measured": self.cost_measured,
                "mtbf": self.mtbf, "job_failures": self.job_failures,
                "job_seconds": self.job_seconds, "cluster_failures": self.cluster_failures,
                "cluster_seconds": self.cluster_seconds}


def young_daly(cost: float, mtbf: float, ceiling: float) -> float:
    """sqrt(2 C M), never below the save's own cost nor above `ceiling`."""
    return min(ceiling, max(cost, math.sqrt(2.0 * cost * mtbf)))


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


@dataclass
class Cluster:
    failures: int = 0
    seconds: float = 0.0
    prior: float = PRIOR_MTBF_SECONDS  # the shell may set another ($PERDURE_MTBF_PRIOR_SECONDS)


def note_cost(rec: JobRecord, seconds: float) -> None:
    rec.costs.append(seconds)
    del rec.costs[:-COSTS_KEPT]


def choose(rec: JobRecord, cluster: Cluster, ceiling: float) -> Interval:
    cost = statistics.median(rec.costs) if rec.costs else DEFAULT_COST_SECONDS
    m = mtbf(rec.failures, rec.seconds, cluster.failures, cluster.seconds, cluster.prior)
    return Interval(young_daly(cost, m, ceiling), cost, len(rec.costs), m, rec.failures,
                    rec.seconds, cluster.failures, cluster.seconds, cluster.prior)


def changed(old: Interval | None, new: Interval) -> bool:
    """Whether `new` is worth publishing: the first, or a move of more than CHANGE_FRACTION."""
    return old is None or abs(new.seconds - old.seconds) > CHANGE_FRACTION * old.seconds
