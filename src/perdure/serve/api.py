"""`/api/v1`: jobs, their events and logs, commands, nodes.

Job references and commands are the CLI's (Store.resolve, controller/usercommands.py).
"""

from __future__ import annotations

import re
from dataclasses import asdict
from enum import Enum
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from perdure.controller.newjob import make_job
from perdure.controller.usercommands import CommandRefused, send_job_command, send_node_command
from perdure.core.model import Job
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError
from perdure.core.states import JobState
from perdure.serve import sse, views
from perdure.serve.context import ServeContext
from perdure.serve.logs import CHUNK, read_chunk
from perdure.serve.models import (
    ERRORS,
    Accepted,
    EventOut,
    JobPage,
    LogChunkOut,
    NodeOut,
    Problem,
    Submitted,
)
from perdure.store.schema import JobRefError
from perdure.views import jobview
from perdure.views.describe import describe_json

router = APIRouter(prefix="/api/v1", responses=ERRORS)

BIG = 2**62  # sqlite integers are 64-bit: bound every number that reaches a query
FIELD_LINE = re.compile(r"^  ([^\s:]+): (.*)$")
JobStates = Enum("JobStates", {s.value: s.value for s in JobState}, type=str)  # type: ignore[misc]


def _ctx(request: Request) -> ServeContext:
    ctx: ServeContext = request.app.state.ctx
    return ctx


def _job(ctx: ServeContext, ref: str) -> Job:
    """The job `ref` names: 400 for an empty reference, 409 for an ambiguous one, 404 for none."""
    store = ctx.store()
    try:
        job_id = store.resolve(ref)
    except JobRefError as exc:
        raise HTTPException(409 if exc.candidates else 400,
                            {"message": f"{exc}; GET /api/v1/jobs lists the jobs",
                             "candidates": exc.candidates}) from None
    job = store.job(job_id) if job_id is not None else None
    if job is None:
        raise HTTPException(404, f"no job {ref!r}; GET /api/v1/jobs lists the jobs")
    return job


def _last_event_id(request: Request) -> int | None:
    """Where a reconnecting EventSource resumes (`Last-Event-ID`), None without one."""
    given = request.headers.get("last-event-id", "").strip()
    if not given:
        return None
    if not (given.isascii() and given.isdigit() and int(given) < BIG):
        raise HTTPException(400, f"Last-Event-ID {given[:40]!r}: not an event id (a number "
                                 f"from 0 to {BIG - 1}); reconnect without it")
    return int(given)


@router.get("/jobs", response_model=JobPage, summary="Jobs, newest first, a page at a time")
def list_jobs(
    request: Request,
    state: Annotated[list[JobStates], Query(description="only jobs in these states")] = [],  # noqa: B006
    q: Annotated[str | None, Query(max_length=100, description="part of a name or id")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=BIG)] = 0,
) -> dict[str, Any]:
    ctx = _ctx(request)
    return views.job_page(ctx.store(), ctx.goodput, [s.value for s in state], q, limit, offset)


@router.get("/jobs/{job_id}", summary="One job: what `perdure describe --json` prints")
def get_job(request: Request, job_id: str) -> dict[str, Any]:
    ctx = _ctx(request)
    return describe_json(ctx.store(), _job(ctx, job_id), ctx.reader)


@router.get("/jobs/{job_id}/timeline", summary="States, attempts and marks over time")
def get_timeline(request: Request, job_id: str) -> dict[str, Any]:
    ctx = _ctx(request)
    job = _job(ctx, job_id)
    return views.timeline(ctx.reader, job, ctx.store().events(job.id))


@router.get(
    "/jobs/{job_id}/events", response_model=list[EventOut],
    summary="The job's events after id `after`; with `Accept: text/event-stream`, live",
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}})
async def get_events(request: Request, job_id: str,
                     after: Annotated[int, Query(ge=0, le=BIG)] = 0) -> Any:
    ctx = _ctx(request)
    job = _job(ctx, job_id)
    if sse.wants_stream(request.headers.get("accept", "")):
        resume = _last_event_id(request)
        return sse.response(sse.events(ctx.store, job.id, after if resume is None else resume,
                                       ctx.stopping))
    return [{"id": e.id, "time": e.time, "kind": e.kind, "message": e.message}
            for e in ctx.store().events(job.id, after=after)]


@router.get(
    "/jobs/{job_id}/logs", response_model=LogChunkOut,
    summary="A replica's log by byte offset (none: its tail); with "
            "`Accept: text/event-stream`, followed live",
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}})
async def get_logs(
    request: Request,
    job_id: str,
    replica: Annotated[str | None, Query(description="default: the primary replica")] = None,
    attempt: Annotated[int | None, Query(ge=1, le=BIG, description="default: the latest")] = None,
    offset: Annotated[int | None, Query(ge=-BIG, le=BIG,
                                        description="byte offset; negative: from the end")] = None,
    stream: Annotated[Literal["all", "stderr", "stdout"], Query(
        description="all: stdout and stderr merged in the order they came")] = "all",
    limit: Annotated[int, Query(ge=1, le=CHUNK)] = CHUNK,
) -> Any:
    ctx = _ctx(request)
    job = _job(ctx, job_id)
    name = replica or job.primary.name
    if (missing := jobview.missing_replica(job, name)) is not None:
        raise HTTPException(404, missing)
    n = attempt if attempt is not None else max(job.attempt, 1)
    if n > max(job.attempt, 1):
        raise HTTPException(404, f"job {job.id} has no attempt {n}; attempts so far: "
                                 f"{job.attempt}")
    path = views.log_file(ctx.state_dir, job, name, n, stream)
    if sse.wants_stream(request.headers.get("accept", "")):
        resume = _last_event_id(request)
        start = offset if resume is None else resume
        return sse.response(sse.log_tail(ctx.store, job.id, path, start, ctx.stopping))
    chunk = read_chunk(path, offset, limit)
    return {"replica": name, "attempt": n, "stream": stream, **asdict(chunk)}


def _spec_problem(exc: SpecError) -> dict[str, Any]:
    """A 422 body naming each bad field, shaped like FastAPI's validation errors."""
    text = str(exc)
    lines = text.splitlines()
    detail = []
    for line in lines[1:]:
        m = FIELD_LINE.match(line)
        if m:
            loc = [int(p) if p.isdigit() else p for p in m.group(1).split(".")]
            detail.append({"loc": ["body", *loc], "msg": m.group(2), "type": "spec"})
    if not detail:
        field, _, msg = text.removeprefix("spec: ").partition(": ")  # "spec": the source
        where: list[Any] = ["body", field] if field.isidentifier() else ["body"]
        detail.append({"loc": where, "msg": msg if len(where) > 1 else text, "type": "spec"})
    return {"detail": detail, "message": text}


@router.post(
    "/jobs", status_code=201, response_model=Submitted,
    summary="Submit a job spec (YAML or JSON); 422 names each bad field",
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
        "application/yaml": {"schema": {"type": "string"}}}}},
    responses={413: {"model": Problem}, 422: {"model": Problem}})
async def submit_job(request: Request, response: Response) -> Any:
    ctx = _ctx(request)
    body = await request.body()  # at most MAX_SPEC_BYTES: BodyLimit refuses more as it comes
    try:
        text = body.decode("utf-8")
        job = make_job(parse_job_spec(text, "spec"), str(ctx.workdir), ctx.cluster,
                       str(ctx.state_dir))
    except UnicodeDecodeError:
        raise HTTPException(422, [{"loc": ["body"], "msg": "the spec is not UTF-8 text",
                                   "type": "spec"}]) from None
    except SpecError as exc:
        return JSONResponse(_spec_problem(exc), status_code=422)
    # in a worker thread, with that thread's connection: the write may wait for a tick
    await run_in_threadpool(lambda: ctx.store().submit(job))
    response.headers["location"] = f"/api/v1/jobs/{job.id}"
    return {"id": job.id, "state": job.state.value}


def _job_command(request: Request, kind: str, ref: str, hold: bool = False) -> dict[str, Any]:
    """What `perdure cancel|preempt|resume` does (409 for a finished job)."""
    ctx = _ctx(request)
    job = _job(ctx, ref)
    try:
        sent = send_job_command(ctx.store(), ctx.state_dir, kind, job.id, hold)
    except CommandRefused as exc:
        raise HTTPException(409, str(exc)) from None
    return {"command": kind, "target": job.id, "state": sent.state or job.state.value,
            "applied": sent.applied, "message": sent.describe(ctx.state_dir)}


@router.post("/jobs/{job_id}/cancel", status_code=202, response_model=Accepted,
             summary="Cancel a job: its replicas are stopped")
def cancel(request: Request, job_id: str) -> dict[str, Any]:
    return _job_command(request, "cancel", job_id)


@router.post("/jobs/{job_id}/preempt", status_code=202, response_model=Accepted,
             summary="Preemption notice: the job saves, suspends and is requeued "
                     "(hold: until resumed)")
def preempt(request: Request, job_id: str, hold: bool = False) -> dict[str, Any]:
    return _job_command(request, "preempt", job_id, hold)


@router.post("/jobs/{job_id}/resume", status_code=202, response_model=Accepted,
             summary="Requeue a held, suspended job")
def resume(request: Request, job_id: str) -> dict[str, Any]:
    return _job_command(request, "resume", job_id)


@router.get("/nodes", response_model=list[NodeOut], summary="Nodes: health, slots used and free")
def list_nodes(request: Request) -> list[dict[str, Any]]:
    ctx = _ctx(request)
    return views.nodes(ctx.store(), ctx.cluster)


def _node_command(request: Request, kind: str, name: str) -> dict[str, Any]:
    ctx = _ctx(request)
    names = [n["name"] for n in views.nodes(ctx.store(), ctx.cluster)]
    if name not in names:
        raise HTTPException(404, f"no node {name!r}; the cluster has {', '.join(names)}")
    try:
        sent = send_node_command(ctx.store(), ctx.state_dir, kind, name)
    except CommandRefused as exc:
        raise HTTPException(409, str(exc)) from None
    return {"command": kind, "target": name, "message": sent.describe(ctx.state_dir)}


@router.post("/nodes/{name}/drain", status_code=202, response_model=Accepted,
             summary="Maintenance: move replicas off the node, place nothing new on it")
def drain(request: Request, name: str) -> dict[str, Any]:
    return _node_command(request, "drain-node", name)


@router.post("/nodes/{name}/restore", status_code=202, response_model=Accepted,
             summary="Bring a failed, drained or quarantined node back")
def restore(request: Request, name: str) -> dict[str, Any]:
    return _node_command(request, "restore-node", name)
