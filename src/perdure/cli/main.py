"""`perdure`: submit, run and inspect resilient training jobs."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path
from typing import Annotated

import typer

from perdure import statedir
from perdure.cli import export, healthcheck, jobs, ops, sim
from perdure.cli.common import Ctx, describe_cluster, die, load_cluster, load_spec, new_job
from perdure.cli.serve import serve
from perdure.core.text import plural
from perdure.store.files import describe_error
from perdure.store.schema import StoreError, UnreadableJob

app = typer.Typer(
    help="Run PyTorch training jobs that survive failure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        import perdure

        typer.echo(f"perdure {perdure.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    state_dir: Annotated[
        Path,
        typer.Option("--state-dir", envvar="PERDURE_STATE_DIR",
                     help="Where jobs, events and logs are kept."),
    ] = Path(".perdure"),
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print perdure's version (pyproject's `version`) and exit.")] = False,
) -> None:
    ctx.obj = Ctx(state_dir.resolve())


@app.command()
def validate(
    click_ctx: typer.Context,
    spec: Path,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help="Also check this cluster file, and that the job fits it (default: "
        "the state dir's, else one node with a slot per core).")] = None,
) -> None:
    """Check a job spec (and a cluster file) as submit does; exit 2 naming each bad field."""
    s = load_spec(spec)
    ctx: Ctx = click_ctx.obj
    c = load_cluster(ctx, cluster)
    new_job(s, spec, c, ctx.state_dir)  # the checks submit makes: fit, commands, checkpoints
    typer.echo(f"{spec}: valid: job {s.name}, {plural(s.total_replicas, 'replica')}, "
               f"{plural(s.total_slots, 'slot')}, queue {s.queue}")
    typer.echo(f"{cluster or 'cluster'}: {describe_cluster(c)}; the job fits")


jobs.register(app)
sim.register(app)
ops.register(app)
export.register(app)
healthcheck.register(app)
app.command()(serve)


OPTION = "--state-dir"


def hoist_state_dir(argv: list[str]) -> list[str]:
    """`argv` with every `--state-dir X` / `--state-dir=X` that follows the subcommand moved
    to just before it, after those already there: the last one on the line wins, as typer
    takes it. Nothing after `--` is touched. A `--state-dir` after the subcommand without its
    value raises ValueError (typer would call it an unknown option)."""
    head, rest = argv[:1], argv[1:]
    end = rest.index("--") if "--" in rest else len(rest)
    before: list[str] = []  # the options ahead of the subcommand, as they are
    moved: list[str] = []
    kept: list[str] = []  # the subcommand and what follows it
    i = 0
    while i < end:
        arg = rest[i]
        if not kept and not arg.startswith("-"):
            kept.append(arg)  # the subcommand
        elif arg.startswith(f"{OPTION}="):
            (moved if kept else before).append(arg)
        elif arg == OPTION:
            if i + 1 >= end:
                raise ValueError(f"{OPTION} needs a directory: {OPTION} DIR")
            (moved if kept else before).extend([arg, rest[i + 1]])
            i += 1
        else:
            (kept if kept else before).append(arg)
        i += 1
    return [*head, *before, *moved, *kept, *rest[end:]]


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        sys.argv = hoist_state_dir(sys.argv)
    except ValueError as exc:
        die(str(exc))
    try:  # the state dir, a file or the disk is the problem: one line
        app()
    except (StoreError, UnreadableJob) as exc:
        die(str(exc))
    except sqlite3.Error as exc:  # the state dir broke under a command: full, I/O error
        where = Ctx.current.state_dir / statedir.DB if Ctx.current else Path(statedir.DB)
        die(describe_error(where, exc))
    except OSError as exc:
        if exc.filename is None:
            raise
        die(f"{exc.filename}: {exc.strerror or exc}")


if __name__ == "__main__":
    main()
