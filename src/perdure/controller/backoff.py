"""Launches the machine refused (disk full, too many open files), tried again later.

Such a failure is the machine's, not the job's: the launch is held, its replica keeping its
place, and tried again after a delay that doubles with each refusal, spending nobody's
restarts or retries.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from perdure.core.events import Launch

MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE,
                            errno.ENOMEM, errno.EAGAIN})
FIRST_SECONDS = 0.5
MAX_SECONDS = 30.0


def machine_errno(exc: BaseException) -> int | None:
    """The errno of a machine shortage behind `exc` (itself or what it was raised from)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in MACHINE_ERRNOS:
            return cur.errno
        cur = cur.__cause__ or cur.__context__
    return None


@dataclass
class _Held:
    launch: Launch
    refusals: int
    due: float


class Backoff:
    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, launch: Launch, why: str, now: float) -> str | None:
        """Hold `launch` after a refusal; what to tell its job the first time (None after)."""
        held = self._held.get(launch.launch_id)
        refusals = 1 if held is None else held.refusals + 1
        delay = min(MAX_SECONDS, FIRST_SECONDS * 2 ** (refusals - 1))
        self._held[launch.launch_id] = _Held(launch, refusals, now + delay)
        if held is not None:
            return None
        return (f"{launch.replica}: the machine refused its launch ({why}); trying again in "
                f"{delay:g} s, then less and less often (every {MAX_SECONDS:g} s at most), "
                "spending no restart or retry")

    def due(self, now: float) -> list[Launch]:
        return [h.launch for h in self._held.values() if h.due <= now]

    def drop(self, launch_id: str) -> bool:
        """Forget a held launch (it was stopped before it could start); whether it was held."""
        return self._held.pop(launch_id, None) is not None
