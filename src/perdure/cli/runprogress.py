"""`perdure run`'s live progress: one rich progress line for the job while it runs (step,
steps/s, ETA, goodput); piped, a plain `progress:` line when it changed, at most every
PLAIN_EVERY seconds, and once at the end. Side effects: reads the store and progress, prints.
"""

from __future__ import annotations

import time
from typing import Any

import typer

from perdure.backends.base import Inspector
from perdure.cli.terminal import say, visible
from perdure.core.goodput import Goodput
from perdure.store.sqlite import Store
from perdure.views import jobview
from perdure.views.reports import goodput

REFRESH_SECONDS = 1.0
PLAIN_EVERY = 10.0


def progress_text(g: Goodput, step: int | None) -> str:
    """`step 160 / 6000 · 12.3 steps/s · ETA 7m49s · goodput 91.2%`."""
    parts = [f"step {jobview.step_text(step, g.total_steps)}"]
    if g.steps_per_second:
        parts.append(f"{g.steps_per_second:.1f} steps/s")
    if g.eta_seconds is not None:
        parts.append(f"ETA {jobview.duration(g.eta_seconds)}")
    parts.append(f"goodput {g.status}")
    return " · ".join(parts)


class RunProgress:
    """The progress line of one job (see the module docstring); a context manager."""

    def __init__(self, store: Store, reader: Inspector, job_id: str) -> None:
        from rich.console import Console

        self.store, self.reader, self.job_id = store, reader, job_id
        self.console = Console()
        self.next_refresh = 0.0
        self.next_plain = time.monotonic() + PLAIN_EVERY
        self.last_plain = ""
        self.progress: Any = None
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn

            self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(24),
                                     TextColumn("{task.fields[info]}"), console=self.console)
            self.task = self.progress.add_task(job_id, total=None, info="starting")

    def __enter__(self) -> RunProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.next_plain = 0.0  # piped: the last state too
        self.refresh(force=True)
        if self.progress is not None:
            self.progress.stop()

    def echo(self, line: str) -> None:
        """Print a line above the progress line (made visible: see terminal)."""
        if self.progress is not None:
            self.progress.console.print(visible(line), markup=False, highlight=False,
                                        soft_wrap=True)
        else:
            say(line)

    def refresh(self, force: bool = False) -> None:
        """Redraw (at most every REFRESH_SECONDS): called from the controller's loop."""
        now = time.monotonic()
        if now < self.next_refresh and not force:
            return
        self.next_refresh = now + REFRESH_SECONDS
        job = self.store.job(self.job_id)
        if job is None or job.attempt == 0:
            return
        g = goodput(self.reader, job, self.store.events(job.id))
        # A long run's account reads more records: never spend over ~5% of the time on it.
        self.next_refresh = now + max(REFRESH_SECONDS, 20 * (time.monotonic() - now))
        step = jobview.step(g, job)
        text = progress_text(g, step)
        if self.progress is not None:
            self.progress.update(self.task, completed=step or 0, total=g.total_steps,
                                 info=text)
        elif now >= self.next_plain and text != self.last_plain:
            self.next_plain, self.last_plain = now + PLAIN_EVERY, text
            typer.echo(f"progress: {text}")
