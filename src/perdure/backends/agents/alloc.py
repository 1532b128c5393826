"""An allocation: the nodes one attempt of a job holds (a Slurm holder job, a Kubernetes
agent pod), and what the platform says of it. No side effects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Slurm's job states of a running allocation (the Kubernetes backend names its pods' alike).
RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING"})


@dataclass
class Alloc:

    job_id: str
    attempt: str
    nodes: list[str]
    slurm_id: str = ""  # "" until submitted
    state: str = "UNSUBMITTED"
    reason: str = ""
    ran: bool = False  # it has been RUNNING
    ending: bool = False  # cancelled by perdure, or ended: takes no more launches
    noticed: bool = False  # its preemption or time-limit notice was passed on
    told: str = ""  # the queue reason last passed on to the controller ("": none, or it ran)
    agents: dict[str, float] = field(default_factory=dict)  # node -> when its step started
    idle_since: float | None = None
    cpus: int = 1
    gpus: int = 0  # per node, for the node agent's step (its replicas take theirs from them)
    warning: int = 40  # seconds before the time limit that Slurm warns the holder (USR1)

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    def describe(self) -> str:
        why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"Slurm job {self.slurm_id or '(unsubmitted)'} {self.state}{why}"
