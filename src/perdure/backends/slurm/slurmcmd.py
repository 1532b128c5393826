"""Slurm's commands as perdure uses them, each a subprocess with a deadline whose output the
pure `parse_*` functions read; a failure raises SlurmError with Slurm's own message.

Side effects: runs sbatch, squeue, sinfo, scontrol, scancel.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass

from perdure.backends.agents.alloc import RUNNING_STATES
from perdure.backends.base import route_address
from perdure.core.clusterspec import SlurmSpec

TIMEOUT = 30.0  # seconds one command may take (slurmctld answers in milliseconds)
SEP = "\x1f"  # field separator of our squeue/sinfo formats (never in a name or a reason)
# The holder job's script: Slurm's signals become a notice in the job's comment (squeue %k):
# USR1 the time limit's warning (--signal=B:USR1@N), TERM a preemption's.
HOLDER = """#!/bin/sh
note() { scontrol update JobId="$SLURM_JOB_ID" Comment="perdure:$1" >/dev/null 2>&1; }
trap 'note timelimit' USR1
trap 'note preempt' TERM
while :; do sleep 1 & wait $!; done
"""
NOTICES = ("perdure:timelimit", "perdure:preempt")


class SlurmError(RuntimeError):
    """A Slurm command failed or is missing: Slurm's message."""


@dataclass(frozen=True)
class JobInfo:

    job_id: str
    name: str
    state: str  # PENDING, RUNNING, CANCELLED, PREEMPTED, TIMEOUT, NODE_FAIL, ...
    reason: str  # why it is pending (Priority, Resources, BeginTime, ...); "None" otherwise
    nodes: str  # the node list, compressed (a,b or n[1-4]); "" while pending
    comment: str

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    state: str  # idle, mix, alloc, down*, drain, ... (sinfo %t)
    address: str
    gpus: int = 0  # its gres gpu count (sinfo %G)

    @property
    def usable(self) -> bool:
        return self.state in ("idle", "mix", "alloc", "comp")


def run(args: list[str], timeout: float = TIMEOUT, stdin: str | None = None) -> str:
    if shutil.which(args[0]) is None:
        raise SlurmError(f"{args[0]}: not found on PATH; install Slurm's client commands "
                         "(Debian: apt-get install slurm-client) on this login node")
    try:
        done = subprocess.run(args, input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(args[:2])}: no answer within {timeout:g}s; is "
                         "slurmctld up (`scontrol ping`)?") from None
    if done.returncode != 0:
        raise SlurmError(f"{' '.join(args[:2])}: {done.stderr.strip() or done.stdout.strip()}"
                         f" (exit {done.returncode})")
    return done.stdout


def sbatch_args(spec: SlurmSpec, name: str, nodes: list[str], cpus: int,
                warning: int, gpus: int = 0, exclude: list[str] | None = None) -> list[str]:
    """sbatch's arguments for a holder job over `nodes` (`cpus` and `gpus` per node), warned
    `warning` seconds before its time limit. No side effects."""
    args = ["sbatch", "--parsable", f"--job-name={name}", f"--time={spec.time_limit}",
            f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}", "--ntasks-per-node=1",
            f"--cpus-per-task={cpus}", "--no-kill", "--output=/dev/null", "--chdir=/",
            f"--signal=B:USR1@{warning}"]
    if gpus:
        args.append(f"--gres=gpu:{gpus}")  # per node: the node agent's step takes them all
    if exclude:
        args.append(f"--exclude={','.join(sorted(exclude))}")
    if spec.partition:
        args.append(f"--partition={spec.partition}")
    if spec.account:
        args.append(f"--account={spec.account}")
    if spec.qos:
        args.append(f"--qos={spec.qos}")
    return [*args, *spec.sbatch_args]


JOB_FORMAT = SEP.join(["%i", "%j", "%T", "%r", "%N", "%k"])


def parse_jobs(text: str) -> dict[str, JobInfo]:
    """squeue -o JOB_FORMAT's lines, by job id. No side effects."""
    out = {}
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) == 6:
            comment = "" if parts[5] == "(null)" else parts[5]
            out[parts[0]] = JobInfo(parts[0], parts[1], parts[2], parts[3], parts[4], comment)
    return out


def jobs(prefix: str) -> dict[str, JobInfo]:
    """This user's jobs (in any state squeue still knows) whose name starts with `prefix`."""
    text = run(["squeue", "--me", "-h", "-t", "all", "-o", JOB_FORMAT])
    return {k: v for k, v in parse_jobs(text).items() if v.name.startswith(prefix)}


def parse_nodes(text: str) -> list[SlurmNode]:
    """sinfo -N -o '%N|%c|%t|%o|%G' lines, each node once."""
    seen: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) == 5 and parts[0] not in seen:
            seen[parts[0]] = SlurmNode(parts[0], int(parts[1] or 0), parts[2], parts[3],
                                       gres_gpus(parts[4]))
    return list(seen.values())


def gres_gpus(gres: str) -> int:
    """The GPUs in a node's gres: "gpu:4", "gpu:a100:2(S:0-1),gpu:v100:1", "(null)" -> 4,
    3, 0. No side effects."""
    total = 0
    for item in gres.split(","):
        words = item.split("(", 1)[0].split(":")
        if words[0] == "gpu" and len(words) >= 2 and words[-1].isdigit():
            total += int(words[-1])
    return total


def sinfo(fields: list[str], partition: str | None) -> str:
    """`sinfo -N` with `fields`, one line per node (and partition)."""
    args = ["sinfo", "-h", "-N", "-o", SEP.join(fields)]
    return run([*args, f"--partition={partition}"] if partition else args)


def nodes(partition: str | None) -> list[SlurmNode]:
    return parse_nodes(sinfo(["%N", "%c", "%t", "%o", "%G"], partition))


DRAINING = ("drain", "drng", "drained")  # sinfo %t, without its `*` (not responding) mark


def parse_drains(text: str) -> dict[str, str]:
    """sinfo -N -o '%N|%t|%E' lines: the draining or drained nodes, each with its reason."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) == 3 and parts[1].rstrip("*~#!%$@^-") in DRAINING:
            out[parts[0]] = "" if parts[2] in ("none", "(null)") else parts[2]
    return out


def drains(partition: str | None) -> dict[str, str]:
    return parse_drains(sinfo(["%N", "%t", "%E"], partition))


@dataclass(frozen=True)
class Reservation:
    name: str
    start: str  # Slurm's local time, as it prints it: 2026-12-06T07:00:00
    nodes: str  # compressed node list
    maint: bool  # Flags=MAINT


def parse_reservations(text: str) -> list[Reservation]:
    """`scontrol show reservation -o` lines (one reservation each). No side effects."""
    out = []
    for line in text.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "ReservationName" in fields:
            flags = fields.get("Flags", "").split(",")
            out.append(Reservation(fields["ReservationName"], fields.get("StartTime", ""),
                                   fields.get("Nodes", ""), "MAINT" in flags))
    return out


def reservations() -> list[Reservation]:
    text = run(["scontrol", "show", "reservation", "-o"])
    return [] if "No reservations" in text else parse_reservations(text)


def drain(node: str, reason: str) -> None:
    run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])


def cancel(job_id: str) -> None:
    run(["scancel", job_id])


def own_address() -> str:
    """This machine's address on the way to slurmctld."""
    host = "127.0.0.1"
    with contextlib.suppress(SlurmError):
        for line in run(["scontrol", "show", "config"]).splitlines():
            if line.startswith("SlurmctldHost["):
                value = line.split("=", 1)[1].strip()  # head(10.0.0.1) or head
                host = value.split("(")[1].rstrip(")") if "(" in value else value
                break
    return route_address(host, 6817)


def expand(nodelist: str) -> list[str]:
    """a,b[1-2] -> [a, b1, b2] (scontrol show hostnames)."""
    if not nodelist or nodelist in ("(null)", "None assigned"):
        return []
    return run(["scontrol", "show", "hostnames", nodelist]).split()
