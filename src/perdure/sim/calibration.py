"""Calibration files: what each step of recovery costs, measured on real runs.

No side effects but `load` and `write` (one file each). `perdure sim calibrate` writes one from
this machine's bench/recovery.py and bench/checkpoint.py runs; `h100-405b` (built in) holds
H100-class figures for a 405B model, each with its source in a comment.
"""

from __future__ import annotations

from pydantic import Field

from perdure.core.specbase import SpecModel
from perdure.core.specread import parse_model
from perdure.sim.sourcefile import read_source

BUILTIN = ("h100-405b",)


class Calibration(SpecModel):
    """Seconds, for one model size on one kind of machine."""

    model: str = "unnamed"
    source: str = ""  # where the figures come from (a command, a paper)
    step_seconds: float = Field(gt=0)
    launch_cold_seconds: float = Field(ge=0)  # process start to training code ready, cold
    launch_warm_seconds: float = Field(ge=0)  # the same from a warm standby
    # A job's first launch on a node with a warm pool (its template imports torch once for
    # every standby); None: as cold
    launch_first_seconds: float | None = Field(None, ge=0)
    stop_seconds: float = Field(1.0, ge=0)  # a stopped replica's exit after the signal
    rendezvous_seconds: float = Field(ge=0)  # every replica up -> the process group formed
    save_blocking_seconds: float = Field(ge=0)  # training blocked per persistent save
    persist_seconds: float = Field(ge=0)  # blocking end -> durable (in the background)
    restore_disk_seconds: float = Field(ge=0)  # from persistent storage
    restore_local_seconds: float = Field(ge=0)  # from a node-local snapshot
    restore_peer_seconds: float = Field(ge=0)  # from a peer's in-memory snapshot
    snapshot_blocking_seconds: float = Field(0.0, ge=0)  # per in-memory snapshot
    snapshot_every_steps: int = Field(10, ge=1)
    nccl_timeout_seconds: float = Field(600.0, gt=0)  # a hang's end without a watchdog
    manual_restart_seconds: float = Field(3600.0, ge=0)  # an operator resubmits a FAILED job


def load(source: str) -> Calibration:
    """A calibration file by path, or a built-in by name (`h100-405b`)."""
    text, name = read_source(source, "calibration file", BUILTIN)
    return parse_model(Calibration, text, name)


def dump(c: Calibration, comments: dict[str, str]) -> str:
    """YAML text of `c`, each field with its comment (where it was measured)."""
    lines = [f"# {line}" for line in c.source.splitlines()] if c.source else []
    for name, value in c.model_dump().items():
        text = repr(value) if isinstance(value, str) else f"{value:g}" if isinstance(
            value, float) else str(value)
        note = comments.get(name)
        lines.append(f"{name}: {text}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"
