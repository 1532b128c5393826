"""Job commands: submit, run, controller, ls, describe, logs."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from perdure.backends.base import Backend, BackendBusy, BackendUnavailable, Stream
from perdure.backends.factory import make_backend
from perdure.cli.common import (
    Ctx,
    die,
    inspector,
    load_cluster,
    load_spec,
    new_job,
    node_dir,
    python,
    remember_cluster,
)
from perdure.cli.reports import elastic_changes, format_elastic, format_goodput, goodput
from perdure.cli.watchreport import format_watchdog, watchdog_json
from perdure.controller.loop import Controller, ControllerBusy
from perdure.controller.secrets import SecretError, job_secret, state_secret
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.core.spec import ClusterSpec
from perdure.store.sqlite import Store, StoredEvent, make_state_dir

ClusterOpt = Annotated[
    Path | None, typer.Option("--cluster", help="Cluster file: nodes and queue quotas.")
]


def _fmt_event(e: StoredEvent, with_job: bool = False) -> str:
    stamp = datetime.fromtimestamp(e.time).strftime("%H:%M:%S.%f")[:-3]
    who = f"{e.job_id} " if with_job and e.job_id else ""
    return f"{stamp} {who}[{e.kind}] {e.message}"


def _backend(ctx: Ctx, cluster: ClusterSpec, source: Path | None) -> Backend:
    """The cluster's backend, or exit naming what is wrong (before anything is stored)."""
    make_state_dir(ctx.state_dir)  # owner-only before the backend writes into it
    try:
        return make_backend(cluster, ctx.state_dir)
    except (BackendBusy, BackendUnavailable) as exc:
        die(str(exc))
    except (ValueError, RuntimeError, ImportError, OSError) as exc:
        die(f"{source or 'cluster'}: {exc}")


def make_controller(ctx: Ctx, store: Store, cluster: ClusterSpec,
                    source: Path | None) -> Controller:
    """The controller `perdure controller`, `run` and `serve` drive: its backend is built (or
    the command exits naming what is wrong) before the cluster file is remembered."""
    backend = _backend(ctx, cluster, source)
    remember_cluster(ctx, source)
    try:
        secret = state_secret(ctx.state_dir)
    except SecretError as exc:
        die(str(exc))
    # On Ray, `python` stays `python`: the node's interpreter (its actor resolves it there).
    interpreter = "python" if cluster.backend == "ray" else python()
    settings = LaunchSettings(state_dir=str(ctx.state_dir), python=interpreter,
                              job_secret=lambda job_id: job_secret(secret, job_id),
                              node_dir=node_dir(ctx.state_dir))
    try:
        return Controller(ctx.state_dir, store, backend, cluster, settings)
    except ValueError as exc:  # a bad setting in the environment ($PERDURE_MTBF_PRIOR_SECONDS)
        backend.close()
        die(str(exc))


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
    cl = load_cluster(ctx, cluster)
    store = ctx.store()
    ctl = make_controller(ctx, store, cl, cluster)
    ctl.listeners.append(lambda e: typer.echo(_fmt_event(e, with_job=True)))
    try:
        ctl.start()
    except (ControllerBusy, BackendBusy, BackendUnavailable) as exc:
        ctl.close()
        die(str(exc))
    for sig in (signal.SIGTERM, signal.SIGHUP):  # like Ctrl-C: leave cleanly, say so
        signal.signal(sig, signal.default_int_handler)
    try:
        ctl.run(exit_when_idle=exit_when_idle)
    except KeyboardInterrupt:
        typer.echo("controller stopped; replicas keep running and a new controller adopts them")
    finally:
        ctl.close()


def _final_state(store: Store, job_id: str) -> str:
    job = store.job(job_id)
    return job.state.value if job else "UNKNOWN"


class _Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP (a CI timeout, `docker stop`, a closed terminal) while
    `run` drives or follows a job: the first cancels the job and waits for its replicas to
    stop; a second leaves the job running for `perdure controller`."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, store: Store, job_id: str) -> None:
        self.store, self.job_id, self.count, self.sent = store, job_id, 0, False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        name = signal.Signals(signum).name
        if self.count > 1:
            raise KeyboardInterrupt
        typer.echo(f"{name}: cancelling job {self.job_id}: its replicas are stopped, then "
                   f"this exits ({name} or Ctrl-C again leaves the job running)")

    def poll(self) -> None:
        """Send the cancel asked for (outside the handler: it may have cut a transaction)."""
        if self.count and not self.sent:
            self.sent = True
            self.store.command("cancel", self.job_id)


def _follow(store: Store, job: Job, ctl: Controller, stop: _Interrupts) -> str:
    """Print a job's events as another controller drives it; when that controller exits,
    take over its lock and drive the job here."""
    last, next_try = 0, 0.0
    try:
        while True:
            stop.poll()
            for e in store.events(job.id, after=last):
                typer.echo(_fmt_event(e))
                last = e.id
            current = store.job(job.id)
            if current is None or current.state.terminal:
                break
            if time.monotonic() >= next_try:
                next_try = time.monotonic() + 0.5
                if _take_over(ctl):
                    ctl.listeners.append(_printer(job.id, after=last))
                    return _drive(ctl, store, job, stop)
            time.sleep(0.1)
    except KeyboardInterrupt:
        typer.echo("stopped following; the job goes on under the other controller")
    ctl.close()
    return _final_state(store, job.id)


def _printer(job_id: str, after: int) -> Callable[[StoredEvent], None]:
    """A listener printing the job's (and the cluster's) events after event `after`."""
    def listener(e: StoredEvent) -> None:
        if e.job_id in (job_id, None) and e.id > after:
            typer.echo(_fmt_event(e))
    return listener


def _take_over(ctl: Controller) -> bool:
    """Start `ctl` if the state dir's controller lock is free now."""
    try:
        ctl.start()
    except ControllerBusy:
        return False
    typer.echo("the other controller has exited: this one drives the job now")
    return True


def run(c: typer.Context, spec: Path, cluster: ClusterOpt = None) -> None:
    """Submit a job and drive it in the foreground until it ends; exit 0 iff it succeeded.

    Ctrl-C, SIGTERM or SIGHUP cancel the job (its replicas are stopped); a second one leaves
    it running for `perdure controller`."""
    ctx: Ctx = c.obj
    cl = load_cluster(ctx, cluster)
    job = new_job(load_spec(spec), spec, cl, ctx.state_dir)
    store = ctx.store()
    ctl = make_controller(ctx, store, cl, cluster)  # checked before anything is stored
    store.submit(job)
    typer.echo(f"job {job.id} submitted (state dir {ctx.state_dir})")
    with _Interrupts(store, job.id) as stop:
        try:
            ctl.start()
        except ControllerBusy:
            typer.echo("another controller drives this state dir; following the job")
            state = _follow(store, job, ctl, stop)
        except (BackendBusy, BackendUnavailable) as exc:
            ctl.close()
            die(f"{exc} (job {job.id} stays queued for a controller that can drive it)")
        else:
            ctl.listeners.append(_printer(job.id, after=0))
            state = _drive(ctl, store, job, stop)
    typer.echo(f"job {job.id} {state}")
    raise typer.Exit(0 if state == "SUCCEEDED" else 1)


def _drive(ctl: Controller, store: Store, job: Job, stop: _Interrupts) -> str:
    """Run the controller until the job ends (or a second interrupt leaves it running)."""
    def done() -> bool:
        stop.poll()
        return job.id not in ctl.snapshot.jobs

    try:
        ctl.run(until=done)
    except KeyboardInterrupt:
        typer.echo("left the job running; `perdure controller` picks it up")
    finally:
        ctl.close()
    return _final_state(store, job.id)


def ls(c: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List jobs."""
    ctx: Ctx = c.obj
    rows = ctx.reader().job_rows()
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
        "checkpoint": {"failed_saves": job.failed_saves, "alert": job.save_alert,
                       "last_error": job.save_error or None},
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
        "watchdog": watchdog_json(events),
        "events": [{"time": e.time, "kind": e.kind, "message": e.message} for e in events],
    }


def describe(
    c: typer.Context, job_ref: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show a job: state, error, replicas and every event with its reason."""
    ctx: Ctx = c.obj
    store = ctx.reader()
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
    if d["checkpoint"]["failed_saves"]:
        ck = d["checkpoint"]
        typer.echo(f"Checkpoints: {'ALERT: ' if ck['alert'] else ''}{ck['failed_saves']} "
                   f"save(s) in a row failed, training goes on: {ck['last_error']}")
    typer.echo("Replicas:")
    for r in d["replicas"]:
        typer.echo(f"  {r['name']:<14} rank {r['rank']:<3} {r['state']:<9} node "
                   f"{r['node'] or '-':<8} restarts {r['restarts']}  exit {r['exit_code']}")
    events = store.events(job.id)
    reader = inspector(ctx)
    g = goodput(reader, job, events)
    for line in [*format_goodput(g), *format_elastic(elastic_changes(reader, job, events), g),
                 *format_watchdog(d["watchdog"])]:
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
    store = ctx.reader()
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
