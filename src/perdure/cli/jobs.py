"""Job commands: submit, run, controller, ls, describe, logs."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from perdure.backends.base import Backend, BackendBusy, BackendSettingError, BackendUnavailable
from perdure.backends.factory import check_environment, make_backend
from perdure.backends.relay.secrets import SecretError, job_secret, state_secret
from perdure.cli.common import (
    Ctx,
    die,
    inspector,
    load_cluster,
    load_spec,
    new_job,
    node_dir,
    remember_cluster,
)
from perdure.cli.runprogress import RunProgress
from perdure.cli.terminal import say, visible
from perdure.controller.loop import Controller, ControllerBusy
from perdure.controller.usercommands import controller_running, start_hint
from perdure.core.clusterspec import ClusterSpec
from perdure.core.launchenv import LaunchSettings
from perdure.core.model import Job
from perdure.store.files import make_state_dir
from perdure.store.schema import StoredEvent, UnreadableJob
from perdure.store.sqlite import Store
from perdure.views import jobview
from perdure.views.describe import describe_json
from perdure.views.reports import elastic_changes, format_elastic, format_goodput, goodput
from perdure.views.watchreport import format_watchdog

ClusterOpt = Annotated[
    Path | None, typer.Option("--cluster", help="Cluster file: nodes and queue quotas.")
]


def _fmt_event(e: StoredEvent, with_job: bool = False) -> str:
    """One event as a line, made visible (see terminal): its message is user data."""
    who = f"{e.job_id} " if with_job and e.job_id else ""
    return visible(f"{jobview.clock(e.time)} {who}[{e.kind}] {e.message}")


def _backend(ctx: Ctx, cluster: ClusterSpec, source: Path | None) -> Backend:
    """The cluster's backend, or exit naming what is wrong (before anything is stored)."""
    try:  # the environment's settings, named on their own (not as the cluster's)
        check_environment()
    except BackendSettingError as exc:
        die(str(exc))
    make_state_dir(ctx.state_dir)  # owner-only before the backend writes into it
    try:
        return make_backend(cluster, ctx.state_dir)
    except (BackendBusy, BackendUnavailable, BackendSettingError) as exc:
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
    # On Ray, Slurm and Kubernetes, `python` stays `python`: the node's interpreter.
    remote = cluster.backend in ("ray", "slurm", "kubernetes")
    interpreter = "python" if remote else sys.executable
    settings = LaunchSettings(state_dir=str(ctx.state_dir), python=interpreter,
                              job_secret=lambda job_id: job_secret(secret, job_id),
                              node_dir=node_dir(ctx.state_dir), health=cluster.health)
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
    if not controller_running(ctx.state_dir):  # stdout stays the id alone, for scripts
        typer.echo(f"no controller is running on {ctx.state_dir}: the job waits until one "
                   f"starts ({start_hint(ctx.state_dir)})", err=True)


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


def _follow(store: Store, job: Job, ctl: Controller, stop: _Interrupts,
            progress: RunProgress) -> str:
    """Print a job's events as another controller drives it; when that controller exits,
    take over its lock and drive the job here."""
    last, next_try = 0, 0.0
    try:
        while True:
            stop.poll()
            progress.refresh()
            for e in store.events(job.id, after=last):
                progress.echo(_fmt_event(e))
                last = e.id
            current = store.job(job.id)
            if current is None or current.state.terminal:
                break
            if time.monotonic() >= next_try:
                next_try = time.monotonic() + 0.5
                if _take_over(ctl):
                    ctl.listeners.append(_printer(job.id, after=last, echo=progress.echo))
                    return _drive(ctl, store, job, stop, progress.refresh)
            time.sleep(0.1)
    except KeyboardInterrupt:
        typer.echo("stopped following; the job goes on under the other controller")
    ctl.close()
    return _final_state(store, job.id)


def _printer(job_id: str, after: int, echo: Callable[[str], Any]) -> Callable[[StoredEvent], None]:
    """A listener printing the job's (and the cluster's) events after event `after`."""
    def listener(e: StoredEvent) -> None:
        if e.job_id in (job_id, None) and e.id > after:
            echo(_fmt_event(e))
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
            with RunProgress(store, inspector(ctx), job.id) as progress:
                state = _follow(store, job, ctl, stop, progress)
        except (BackendBusy, BackendUnavailable) as exc:
            ctl.close()
            die(f"{exc} (job {job.id} stays queued for a controller that can drive it)")
        else:
            with RunProgress(store, inspector(ctx), job.id) as progress:
                ctl.listeners.append(_printer(job.id, after=0, echo=progress.echo))
                state = _drive(ctl, store, job, stop, progress.refresh)
    typer.echo(f"job {job.id} {state}")
    raise typer.Exit(0 if state == "SUCCEEDED" else 1)


def _drive(ctl: Controller, store: Store, job: Job, stop: _Interrupts,
           refresh: Callable[[], None]) -> str:
    """Run the controller until the job ends (or a second interrupt leaves it running)."""
    def done() -> bool:
        stop.poll()
        refresh()
        return job.id not in ctl.snapshot.jobs

    try:
        ctl.run(until=done)
    except KeyboardInterrupt:
        typer.echo("left the job running; `perdure controller` picks it up")
    finally:
        ctl.close()
    return _final_state(store, job.id)


def ls(c: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List jobs: state, step, goodput, age and time running."""
    ctx: Ctx = c.obj
    store = ctx.reader()
    reader = inspector(ctx)
    rows = store.job_rows()
    now = time.time()
    for r in rows:
        try:
            job = store.job(r["id"])
        except UnreadableJob:  # listed as stored; `describe` says what is wrong with it
            job = None
        if job is None:
            continue
        g = goodput(reader, job, store.events(job.id))
        r.update({**jobview.progress_json(g, job), "running_seconds": g.running,
                  **jobview.errors_json(job), "queue_reason": jobview.queue_reason(job)})
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("ID", "NAME", "STATE", "ATTEMPT", "QUEUE", "PRIORITY", "STEP", "GOODPUT",
                  "AGE", "DURATION", "ERROR", box=None)
    for r in rows:
        state = f"{r['state']} ({r['queue_reason']})" if r.get("queue_reason") else r["state"]
        cells = (r["id"], r["name"], state, str(r["attempt"]), r["queue"],
                 str(r["priority"]), jobview.step_text(r.get("step"), r.get("total_steps")),
                 r.get("goodput_status", "-"), jobview.duration(now - r["created"]),
                 jobview.duration(r.get("running_seconds")), _ls_error(r))
        table.add_row(*map(visible, cells))
    console = Console(markup=False)  # a cell's `[red]` is text (see terminal)
    if not console.is_terminal:  # piped: whole cells, never cut to 80 columns
        console = Console(width=1000, markup=False)
    console.print(table)


def _ls_error(row: dict[str, Any]) -> str:
    if row.get("error"):
        return str(row["error"]["code"])
    if row.get("last_failure"):
        return f"last failure (recovered): {row['last_failure']['code']}"
    return ""


def _replica_line(r: dict[str, Any]) -> str:
    """One replica in `describe`: where it runs, its processes and GPUs (those it holds on its
    node, by index) when it has more than one or any."""
    extra = f"  procs {r['procs']}" if r["procs"] > 1 else ""
    if r["gpus"]:
        held = ",".join(str(i) for i in r["devices"]) if r["devices"] else "-"
        extra += f"  gpus {r['gpus']} ({held})"
    return jobview.replica_line(r) + extra


def describe(
    c: typer.Context, job_ref: str, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show a job: state, error, replicas and every event with its reason."""
    ctx: Ctx = c.obj
    store = ctx.reader()
    job = store.job(ctx.resolve(store, job_ref))
    assert job is not None
    reader = inspector(ctx)
    d = describe_json(store, job, reader)
    if as_json:
        typer.echo(json.dumps(d, indent=2))  # JSON escapes control characters itself
        return
    say(f"Job {d['id']} ({d['name']})  state {d['state']}  attempt {d['attempt']}  "
        f"step {jobview.step_text(d['step'], d['total_steps'])}  "
        f"queue {d['queue']}  priority {d['priority']}")
    if d["queue_reason"]:
        say(f"Waiting in the backend's queue: {d['queue_reason']}")
    line = jobview.error_line(d)
    if line:
        say(line)
    if d["starts_over"]:
        say(f"Lost work: {d['starts_over']}")
    if d["checkpoint"]["failed_saves"]:
        ck = d["checkpoint"]
        say(f"Checkpoints: {'ALERT: ' if ck['alert'] else ''}{ck['failed_saves']} "
            f"save(s) in a row failed, training goes on: {ck['last_error']}")
    say("Replicas:")
    for r in d["replicas"]:
        say(_replica_line(r))
    if job.spec.total_spares:
        held = ", ".join(d["spares"]) or "none free yet"
        say(f"Spare nodes: {held} ({len(d['spares'])} of {job.spec.total_spares})")
    events = store.events(job.id)
    g = goodput(reader, job, events)
    for line in [*format_goodput(g), *format_elastic(elastic_changes(reader, job, events), g),
                 *format_watchdog(d["watchdog"])]:
        say(line)
    say("Events:")
    for e in events:
        say("  " + _fmt_event(e))


def register(app: typer.Typer) -> None:
    from perdure.cli.logcmd import logs

    for fn in (submit, run, controller, describe, logs):
        app.command()(fn)
    app.command("ls")(ls)
