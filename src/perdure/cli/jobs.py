"""Job commands: submit, run, controller, ls, describe, logs."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from perdure.backends.base import BackendBusy, BackendUnavailable, Stream
from perdure.backends.factory import make_backend
from perdure.cli.common import Ctx, die, inspector, load_cluster, load_spec, new_job, python
from perdure.cli.reports import elastic_changes, format_elastic, format_goodput, goodput
from perdure.controller.loop import Controller, ControllerBusy
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.store.sqlite import Store, StoredEvent

ClusterOpt = Annotated[
    Path | None, typer.Option("--cluster", help="Cluster file: nodes and queue quotas.")
]


def _fmt_event(e: StoredEvent, with_job: bool = False) -> str:
    stamp = datetime.fromtimestamp(e.time).strftime("%H:%M:%S.%f")[:-3]
    who = f"{e.job_id} " if with_job and e.job_id else ""
    return f"{stamp} {who}[{e.kind}] {e.message}"


def _controller(ctx: Ctx, store: Store, cluster_path: Path | None) -> Controller:
    cluster = load_cluster(ctx, cluster_path, remember=True)
    try:
        backend = make_backend(cluster, ctx.state_dir)
    except (BackendBusy, BackendUnavailable) as exc:
        die(str(exc))
    # On Ray, `python` stays `python`: the node's interpreter (its actor resolves it there).
    interpreter = "python" if cluster.backend == "ray" else python()
    settings = LaunchSettings(state_dir=str(ctx.state_dir), python=interpreter)
    return Controller(ctx.state_dir, store, backend, cluster, settings)


def submit(c: typer.Context, spec: Path, cluster: ClusterOpt = None) -> None:
    """Queue a job; print its id. A running controller picks it up."""
    ctx: Ctx = c.obj
    job = new_job(load_spec(spec), spec, load_cluster(ctx, cluster), ctx.state_dir)
    store = ctx.store()
    store.submit(job)
    typer.echo(job.id)


def controller(
    c: typer.Context,
    cluster: ClusterOpt = None,
    exit_when_idle: Annotated[bool, typer.Option(help="Exit once no job is left.")] = False,
) -> None:
    """Drive every unfinished job in the state dir (reconciles after a crash)."""
    ctx: Ctx = c.obj
    store = ctx.store()
    ctl = _controller(ctx, store, cluster)
    ctl.listeners.append(lambda e: typer.echo(_fmt_event(e, with_job=True)))
    try:
        ctl.start()
    except (ControllerBusy, BackendBusy, BackendUnavailable) as exc:
        die(str(exc))
    try:
        ctl.run(exit_when_idle=exit_when_idle)
    except KeyboardInterrupt:
        typer.echo("controller stopped; replicas keep running and a new controller adopts them")
    finally:
        ctl.close()


def _final_state(store: Store, job_id: str) -> str:
    job = store.job(job_id)
    return job.state.value if job else "UNKNOWN"


def _follow(store: Store, job_id: str) -> str:
    """Print a job's events as they land (another controller drives it)."""
    last = 0
    while True:
        for e in store.events(job_id, after=last):
            typer.echo(_fmt_event(e))
            last = e.id
        job = store.job(job_id)
        if job is None or job.state.terminal:
            return _final_state(store, job_id)
        time.sleep(0.1)


def run(c: typer.Context, spec: Path, cluster: ClusterOpt = None) -> None:
    """Submit a job and drive it in the foreground until it ends; exit 0 iff it succeeded."""
    ctx: Ctx = c.obj
    cl = load_cluster(ctx, cluster)
    job = new_job(load_spec(spec), spec, cl, ctx.state_dir)
    store = ctx.store()
    store.submit(job)
    typer.echo(f"job {job.id} submitted (state dir {ctx.state_dir})")
    ctl = _controller(ctx, store, cluster)
    ctl.listeners.append(lambda e: typer.echo(_fmt_event(e)) if e.job_id in (job.id, None)
                         else None)
    try:
        ctl.start()
    except ControllerBusy:
        typer.echo("another controller drives this state dir; following the job")
        state = _follow(store, job.id)
    except (BackendBusy, BackendUnavailable) as exc:
        ctl.close()
        die(f"{exc} (job {job.id} stays queued for a controller that can drive it)")
    else:
        state = _drive(ctl, store, job)
    typer.echo(f"job {job.id} {state}")
    raise typer.Exit(0 if state == "SUCCEEDED" else 1)


def _drive(ctl: Controller, store: Store, job: Job) -> str:
    """Run the controller until the job ends; Ctrl-C cancels the job (twice: leave at once)."""
    def interrupted(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        typer.echo("interrupted: cancelling the job (Ctrl-C again leaves it running)")
        store.command("cancel", job.id)

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        ctl.run(until=lambda: job.id not in ctl.snapshot.jobs)
    except KeyboardInterrupt:
        typer.echo("left the job running; `perdure controller` picks it up")
    finally:
        signal.signal(signal.SIGINT, previous)
        ctl.close()
    return _final_state(store, job.id)


def ls(c: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List jobs."""
    ctx: Ctx = c.obj
    rows = ctx.store().job_rows()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("ID", "NAME", "STATE", "ATTEMPT", "QUEUE", "PRIORITY", "AGE", box=None)
    now = time.time()
    for r in rows:
        table.add_row(r["id"], r["name"], r["state"], str(r["attempt"]), r["queue"],
                      str(r["priority"]), f"{now - r['created']:.0f}s")
    Console().print(table)


def describe_json(store: Store, job: Job, state_dir: Path) -> dict[str, Any]:
    events = store.events(job.id)
    reader = inspector(Ctx(state_dir))
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state.value,
        "queue": job.spec.queue,
        "priority": job.priority,
        "attempt": job.attempt,
        "created": job.created,
        "step": job.step,
        "error": job.error.to_json() if job.error else None,
        "retries": job.retries,
        "replicas": [
            {"name": r.name, "pool": r.pool, "index": r.index, "rank": r.rank,
             "state": r.state.value, "restarts": r.restarts, "exit_code": r.exit_code,
             "node": r.node}
            for r in job.replicas
        ],
        "goodput": goodput(reader, job, events).to_json(),
        "elastic": [{"time": c.time, "what": c.what, "cost_seconds": c.cost_s, "cost": c.cost}
                    for c in elastic_changes(reader, job, events)],
        "events": [{"time": e.time, "kind": e.kind, "message": e.message} for e in events],
    }


def describe(
    c: typer.Context, job_ref: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show a job: state, error, replicas and every event with its reason."""
    ctx: Ctx = c.obj
    store = ctx.store()
    job = store.job(ctx.resolve(store, job_ref))
    assert job is not None
    d = describe_json(store, job, ctx.state_dir)
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    typer.echo(f"Job {d['id']} ({d['name']})  state {d['state']}  attempt {d['attempt']}  "
               f"queue {d['queue']}  priority {d['priority']}")
    if d["error"]:
        typer.echo(f"Error: {d['error']['code']}: {d['error']['message']}")
    typer.echo("Replicas:")
    for r in d["replicas"]:
        typer.echo(f"  {r['name']:<14} rank {r['rank']:<3} {r['state']:<9} node "
                   f"{r['node'] or '-':<8} restarts {r['restarts']}  exit {r['exit_code']}")
    events = store.events(job.id)
    reader = inspector(ctx)
    g = goodput(reader, job, events)
    for line in [*format_goodput(g), *format_elastic(elastic_changes(reader, job, events), g)]:
        typer.echo(line)
    typer.echo("Events:")
    for e in events:
        typer.echo("  " + _fmt_event(e))


def logs(
    c: typer.Context,
    job_ref: str,
    replica: Annotated[str | None, typer.Option("--replica", "-r")] = None,
    attempt: Annotated[int | None, typer.Option("--attempt", "-a")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    stderr: Annotated[bool, typer.Option("--stderr/--stdout")] = True,
) -> None:
    """Print a replica's log (stderr by default; stdout with --stdout)."""
    ctx: Ctx = c.obj
    store = ctx.store()
    job = store.job(ctx.resolve(store, job_ref))
    assert job is not None
    name = replica or job.primary.name
    if name not in {r.name for r in job.replicas}:
        die(f"job {job.id} has no replica {name!r}; it has "
            f"{', '.join(r.name for r in job.replicas)}")
    n = attempt if attempt is not None else max(job.attempt, 1)
    reader = inspector(ctx)
    stream: Stream = "err" if stderr else "out"
    offset = 0
    while True:
        chunk = reader.read_log(job.id, n, name, stream, offset)
        if chunk is None and offset == 0 and not follow:
            die(f"replica {name} of {job.id} has no std{stream} log for attempt {n} "
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


def register(app: typer.Typer) -> None:
    for fn in (submit, run, controller, describe, logs):
        app.command()(fn)
    app.command("ls")(ls)
