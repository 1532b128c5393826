"""Whether a relaunched replica resumes, and how: the spec's `resume:` and what else tells
perdure that a script picks up where it stopped.

No side effects: the shell looks the glob up (controller.resumes) and hands the matches in.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from perdure.core.events import ResumeArgs
from perdure.core.model import Job
from perdure.core.replica import Replica
from perdure.core.spec import LATEST, PoolSpec

_NUMBER = re.compile(r"\d+")
STARTS_OVER = "starts-over"  # the kind of the event `from_the_beginning` words
NAMED = 3  # replicas named in that event; a big group's others are counted


def resume_args(job: Job, r: Replica, pool: PoolSpec) -> ResumeArgs | None:
    """The `resume:` of `r`'s launch, None for its first or a pool without one; a group
    round's ranks share a key, so the shell decides once for all of them."""
    if pool.resume is None or r.launches <= 1:
        return None
    pattern = pool.resume.when_exists
    if not posixpath.isabs(pattern):
        pattern = posixpath.normpath(posixpath.join(job.spec_dir, pattern))
    group = job.spec.restart.scope == "group" and not job.elastic
    key = (f"{job.id}.{job.attempt}.round-{job.round}" if group
           else f"{job.id}.{job.attempt}.{r.name}.{r.launches}")
    return ResumeArgs(pattern, tuple(pool.resume.args), key)


def newest(matches: Sequence[tuple[str, float]]) -> str:
    """The newest of (path, mtime): the highest last number in its base name
    (checkpoint-1200 over checkpoint-900), then the latest mtime, then the name."""
    def order(match: tuple[str, float]) -> tuple[int, float, str]:
        path, mtime = match
        numbers = _NUMBER.findall(posixpath.basename(path.rstrip("/")))
        return (int(numbers[-1]) if numbers else -1, mtime, path)

    return max(matches, key=order)[0]


def appended(args: Sequence[str], matches: Sequence[tuple[str, float]]) -> tuple[str, ...]:
    """`args` with {latest} replaced by the newest match; () when nothing matched."""
    if not matches:
        return ()
    latest = newest(matches)
    return tuple(a.replace(LATEST, latest) for a in args)


def says_it_resumes(job: Job, pool: PoolSpec) -> bool:
    """Whether anything tells perdure that `pool`'s script resumes: a checkpoint it reported,
    a `resume:`, or a framework integration."""
    return job.last_checkpoint is not None or pool.resume is not None or bool(pool.integrations)


def from_the_beginning(job: Job, names: Sequence[str], now: float) -> str:
    """The line for replicas relaunched with nothing that says their script resumes."""
    who = ", ".join(names[:NAMED])
    if len(names) > NAMED:
        who += f" and {len(names) - NAMED} more"
    verb = "restarts" if len(names) == 1 else "restart"
    since = job.running_since
    lost = (f"~{max(0.0, now - since):.0f} s of work since its start is lost" if since is not None
            else "the work since its start is lost")
    return (f"{who} {verb} from the beginning: nothing tells perdure this script resumes; "
            f"{lost} (add `resume:` or use perdure's Checkpointer)")
