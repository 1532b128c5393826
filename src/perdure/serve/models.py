"""The API's response shapes, for /openapi.json and for clients; handlers return plain dicts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class JobSummary(BaseModel):
    id: str
    name: str
    queue: str
    priority: int
    state: str
    attempt: int
    created: float
    updated: float
    replicas: int
    replicas_running: int
    step: int | None
    total_steps: int | None = None
    error: dict[str, str] | None  # why it failed or was cancelled
    last_failure: dict[str, Any] | None = None  # a failure it recovered from
    goodput: float | None
    goodput_status: str = "not started"  # "91.2%", "no progress reported", "not started"


class JobPage(BaseModel):
    total: int
    offset: int
    limit: int
    counts: dict[str, int]
    jobs: list[JobSummary]


class EventOut(BaseModel):
    id: int
    time: float
    kind: str
    message: str


class LogChunkOut(BaseModel):
    replica: str
    attempt: int
    stream: str
    offset: int
    next_offset: int
    size: int
    text: str
    exists: bool


class NodeOut(BaseModel):
    name: str
    state: str  # READY, DRAINING, DRAINED, DOWN, or QUARANTINED while fenced
    reason: str = ""  # why it is QUARANTINED (the failures held against it)
    slots: int
    used: int
    free: int
    gpus: int = 0  # the node's GPUs (0: none)
    gpus_used: int = 0  # held by running replicas


class Accepted(BaseModel):
    command: str
    target: str
    state: str | None = None
    applied: bool = False  # applied at once: no controller ran and nothing had to stop
    message: str = ""  # what `perdure cancel` and friends print


class Submitted(BaseModel):
    id: str
    state: str


class Problem(BaseModel):
    detail: Any


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "No valid token or session"},
    400: {"model": Problem, "description": "A malformed request (an empty job reference, "
                                           "a bad Last-Event-ID)"},
    404: {"model": Problem, "description": "No such job, replica, attempt or node"},
    409: {"model": Problem, "description": "An ambiguous job reference (its candidates are "
                                           "listed), or a command a finished job refuses"},
}
