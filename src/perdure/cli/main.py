"""`perdure`: submit, run and inspect resilient training jobs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from perdure.cli import jobs, ops
from perdure.cli.common import Ctx, load_spec
from perdure.serve.command import serve

app = typer.Typer(
    help="Run PyTorch training jobs that survive failure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    state_dir: Annotated[
        Path,
        typer.Option("--state-dir", envvar="PERDURE_STATE_DIR",
                     help="Where jobs, events and logs are kept."),
    ] = Path(".perdure"),
) -> None:
    ctx.obj = Ctx(state_dir.resolve())


@app.command()
def validate(spec: Path) -> None:
    """Check a job spec; exit non-zero naming each bad field."""
    s = load_spec(spec)
    typer.echo(f"{spec}: valid: job {s.name}, {s.total_replicas} replicas, "
               f"{s.total_slots} slots, queue {s.queue}")


jobs.register(app)
ops.register(app)
app.command()(serve)


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    app()


if __name__ == "__main__":
    main()
