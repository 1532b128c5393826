"""Read a replica's stack dump (py-spy's `dump --json`): where its main thread is, whether it
waits inside a collective, and the dump as text for the stacks file.

No side effects. A rank counts as inside a collective when a frame of its main thread is in
`torch.distributed`, in DDP's module, or in autograd's backward (where DDP all-reduces).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_COLLECTIVE_FILES = ("torch/distributed/", "torch/nn/parallel/distributed.py")
_COLLECTIVE_FUNCS = ("_engine_run_backward", "run_backward")
_LIBRARY_MARKS = ("site-packages/", "dist-packages/", "/lib/python3")

Thread = Mapping[str, Any]


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # full path
    short: str  # as py-spy shows it: the path below site-packages, or the base name
    line: int

    def __str__(self) -> str:
        return f"{self.function} ({self.short}:{self.line})"

    @property
    def in_collective(self) -> bool:
        path = self.file.replace("\\", "/")
        return any(p in path for p in _COLLECTIVE_FILES) or (
            "torch/" in path and self.function in _COLLECTIVE_FUNCS)

    @property
    def in_library(self) -> bool:
        return self.file.startswith("<") or any(m in self.file for m in _LIBRARY_MARKS)


@dataclass(frozen=True)
class StackSummary:
    """One replica's stacks, boiled down. `attached` False: no stacks (then `where` says why)."""

    attached: bool
    in_collective: bool
    where: str  # the main thread's innermost frame, and the user's frame that called into it


def frames(thread: Thread) -> list[Frame]:
    out = []
    for f in thread.get("frames") or []:
        file = str(f.get("filename") or "?")
        out.append(Frame(str(f.get("name") or "?"), file,
                         str(f.get("short_filename") or file.rsplit("/", 1)[-1]),
                         int(f.get("line") or 0)))
    return out


def main_thread(threads: Sequence[Thread]) -> Thread | None:
    return next((t for t in threads if t.get("thread_name") == "MainThread"),
                threads[0] if threads else None)


def summarize(threads: Sequence[Thread]) -> StackSummary:
    """Where the main thread is (the first thread when none is called MainThread)."""
    main = main_thread(threads)
    if main is None:
        return StackSummary(False, False, "the dump has no Python threads")
    stack = frames(main)
    if not stack:
        return StackSummary(True, False, "no Python frames (in native code or exiting)")
    where = str(stack[0])
    caller = next((f for f in stack if not f.in_library), None)
    if caller is not None and caller != stack[0]:
        where += f" called from {caller}"
    return StackSummary(True, any(f.in_collective for f in stack), where)


def unavailable(why: str) -> StackSummary:
    return StackSummary(False, False, why)


def render(threads: Sequence[Thread]) -> str:
    """The dump as py-spy prints it, with full paths: every thread, innermost frame first."""
    lines = []
    for t in threads:
        state = "active" if t.get("active") else "idle"
        lines.append(f"Thread {t.get('os_thread_id', '?')} ({state}): "
                     f"\"{t.get('thread_name') or ''}\"")
        lines.extend(f"    {f.function} ({f.file}:{f.line})" for f in frames(t))
    return "\n".join(lines) + "\n"
