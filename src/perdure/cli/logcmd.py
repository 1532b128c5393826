"""`perdure logs`: a replica's stdout and stderr, merged in the order they came, or one."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from perdure.backends.base import Inspector, Stream
from perdure.cli.common import Ctx, die, inspector
from perdure.views import jobview


def logs(
    c: typer.Context,
    job_ref: str,
    replica: Annotated[str | None, typer.Option("--replica", "-r")] = None,
    attempt: Annotated[int | None, typer.Option("--attempt", "-a")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="Only what it printed to stdout.")]
    = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="Only what it printed to stderr.")]
    = False,
) -> None:
    """Print a replica's log: stdout and stderr merged in the order they came (one of them
    with --stdout or --stderr)."""
    ctx: Ctx = c.obj
    store = ctx.reader()
    job = store.job(ctx.resolve(store, job_ref))
    assert job is not None
    name = replica or job.primary.name
    if (missing := jobview.missing_replica(job, name)) is not None:
        die(missing)
    if stdout and stderr:
        die("--stdout and --stderr each select one stream; give neither for both, merged")
    n = attempt if attempt is not None else max(job.attempt, 1)
    reader = inspector(ctx)
    stream = log_stream(reader, job.id, n, name, "out" if stdout else "err" if stderr else "log")
    offset = 0
    while True:
        chunk = reader.read_log(job.id, n, name, stream, offset)
        if chunk is None and offset == 0 and not follow:
            die(f"replica {name} of {job.id} has no {STREAM_NAMES[stream]} for attempt {n} "
                f"(attempts so far: {job.attempt})")
        if chunk:
            typer.echo(chunk.decode(errors="replace"), nl=False)
            offset += len(chunk)
            continue
        if not follow:
            return
        j = store.job(job.id)
        if j is None or j.state.terminal:
            # A last read: what the replica wrote between the last read and its end.
            tail = reader.read_log(job.id, n, name, stream, offset)
            if tail:
                typer.echo(tail.decode(errors="replace"), nl=False)
            return
        time.sleep(0.2)


STREAM_NAMES = {"out": "stdout log", "err": "stderr log", "log": "log"}


def log_stream(reader: Inspector, job_id: str, attempt: int, replica: str,
               wanted: Stream) -> Stream:
    """The stream to read: the merged log, or stderr for an attempt run before there was one."""
    if wanted == "log" and reader.read_log(job_id, attempt, replica, "log", 0) is None \
            and reader.read_log(job_id, attempt, replica, "err", 0) is not None:
        return "err"
    return wanted
