"""The shell's half of `resume:`: look a relaunch's glob up (core.resume decides the args).

Once per launch of a group (`key`): every rank of a group restart gets the same command even
if a checkpoint appears meanwhile.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections import OrderedDict

from perdure.core.events import Launch
from perdure.core.records import Event
from perdure.core.resume import appended

KEPT = 64  # group launches remembered: the ranks of one are launched within a few ticks


class ResumeShell:
    def __init__(self) -> None:
        self._decided: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def apply(self, launch: Launch, now: float) -> tuple[Launch, list[Event]]:
        """`launch` with the args appended (or as it is), and the event that says which."""
        request = launch.resume
        if request is None:
            return launch, []
        events: list[Event] = []
        args = self._decided.get(request.key)
        if args is None:
            args = appended(request.args, _matches(request.glob))
            self._decided[request.key] = args
            while len(self._decided) > KEPT:
                self._decided.popitem(last=False)
            said = (f"resume: {request.glob} matches: appending {' '.join(args)}" if args else
                    f"resume: {request.glob} matches nothing: starting without "
                    f"{' '.join(request.args)} (from the beginning)")
            events.append(Event(now, launch.job_id, "resume", f"{launch.replica}: {said}"))
        if not args:
            return launch, events
        return dataclasses.replace(launch, command=(*launch.command, *args)), events


def _matches(pattern: str) -> list[tuple[str, float]]:
    found = []
    for path in glob.glob(pattern, recursive=True):
        try:
            found.append((path, os.stat(path).st_mtime))
        except OSError:
            continue
    return found
