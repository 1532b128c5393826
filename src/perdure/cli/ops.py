"""Operating commands: cancel, preempt, resume, chaos, node maintenance."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from perdure.cli.common import Ctx, die, inspector, load_cluster
from perdure.cli.terminal import say
from perdure.controller.usercommands import CommandRefused, send_job_command, send_node_command
from perdure.core.text import plural
from perdure.views import jobview

chaos_app = typer.Typer(help="Inject faults into running jobs and nodes.", no_args_is_help=True)
node_app = typer.Typer(help="Node maintenance.", no_args_is_help=True)

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "SEGV": signal.SIGSEGV,
           "ABRT": signal.SIGABRT, "INT": signal.SIGINT}


def _job_command(c: typer.Context, kind: str, job_ref: str, hold: bool = False) -> None:
    ctx: Ctx = c.obj
    store = ctx.reader()
    job_id = ctx.resolve(store, job_ref)
    try:
        sent = send_job_command(store, ctx.state_dir, kind, job_id, hold)
    except CommandRefused as exc:
        die(str(exc))
    typer.echo(sent.describe(ctx.state_dir))


def cancel(c: typer.Context, job: str) -> None:
    """Cancel a job: its replicas are stopped."""
    _job_command(c, "cancel", job)


def preempt(
    c: typer.Context,
    job: str,
    hold: Annotated[bool, typer.Option(help="Stay SUSPENDED until `perdure resume`.")] = False,
) -> None:
    """Send a preemption notice: the job saves, suspends and is requeued."""
    _job_command(c, "preempt", job, hold)


def resume(c: typer.Context, job: str) -> None:
    """Requeue a held, suspended job."""
    _job_command(c, "resume", job)


@chaos_app.command("kill")
def chaos_kill(
    c: typer.Context,
    job: str,
    replica: str,
    sig: Annotated[str, typer.Option("--signal", help="KILL, TERM, SEGV or ABRT")] = "KILL",
) -> None:
    """Send a signal to one replica's process, as a crash would."""
    ctx: Ctx = c.obj
    store = ctx.reader()
    j = store.job(ctx.resolve(store, job))
    assert j is not None
    if (missing := jobview.missing_replica(j, replica)) is not None:
        die(missing)
    r = next(x for x in j.replicas if x.name == replica)
    if sig.upper() not in SIGNALS:
        die(f"--signal {sig!r}: use one of {', '.join(SIGNALS)}")
    if not r.alive or r.launch_id is None:
        die(f"replica {replica} of {j.id} is not running (state {r.state.value})")
    try:
        inspector(ctx).signal(r.launch_id, SIGNALS[sig.upper()])
    except ProcessLookupError:
        die(f"replica {replica} of {j.id} has no process any more (it exited; a running "
            "controller records why)")
    typer.echo(f"sent SIG{sig.upper()} to {replica} of {j.id}")


def _node_slots(ctx: Ctx) -> dict[str, int]:
    """The cluster file's nodes; on Ray without `nodes`, those the controller discovered."""
    listed = {n.name: n.slots for n in load_cluster(ctx, None).nodes}
    return listed or {name: n.slots for name, n in sorted(ctx.reader().nodes().items())}


def _node_command(c: typer.Context, kind: str, node: str) -> None:
    ctx: Ctx = c.obj
    names = list(_node_slots(ctx))
    if node not in names:
        die(f"no node {node!r}; the cluster has {', '.join(names)}")
    try:
        sent = send_node_command(ctx.reader(), ctx.state_dir, kind, node)
    except CommandRefused as exc:
        die(str(exc))
    typer.echo(sent.describe(ctx.state_dir))


@chaos_app.command("fail-node")
def fail_node(c: typer.Context, node: str) -> None:
    """Fail a node: every replica on it dies; the node stays down until restored."""
    _node_command(c, "fail-node", node)


@node_app.command("drain")
def drain(c: typer.Context, node: str) -> None:
    """Maintenance: move replicas off the node (no restart counted); place nothing new on it."""
    _node_command(c, "drain-node", node)


@node_app.command("preempt")
def preempt_node(c: typer.Context, node: str) -> None:
    """Reclaim a node (spot): jobs on it get a notice, save, suspend and are requeued."""
    _node_command(c, "preempt-node", node)


@node_app.command("restore")
def restore(c: typer.Context, node: str) -> None:
    """Bring a failed, drained or quarantined node back (a quarantine's failures are
    forgotten)."""
    _node_command(c, "restore-node", node)


@node_app.command("ls")
def node_ls(c: typer.Context) -> None:
    """List nodes and their states."""
    ctx: Ctx = c.obj
    stored = ctx.reader().nodes()
    declared = {n.name: n.gpus for n in load_cluster(ctx, None).nodes}
    for name, slots in _node_slots(ctx).items():
        node = stored.get(name)
        state = node.shown if node is not None else "READY"
        # the controller records what it found; before it ran, what the file declares
        gpus = node.gpus if node is not None else declared.get(name)
        shown = "" if not gpus else f"{plural(gpus, 'GPU')}  "
        why = f"  {node.fence}" if node is not None and node.fence else ""
        say(f"{name:<12} {plural(slots, 'slot') + '  ':<9}{shown}{state}{why}")
    if line := inspector(ctx).pool_summary():
        say(line)


def register(app: typer.Typer) -> None:
    for fn in (cancel, preempt, resume):
        app.command()(fn)
    app.add_typer(chaos_app, name="chaos")
    app.add_typer(node_app, name="node")
