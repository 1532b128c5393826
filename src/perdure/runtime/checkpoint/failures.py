"""Saves that failed for good (after the storage's retries): counted, reported, survived.

After ``alert_after`` failures in a row the report says so loudly until a save succeeds again.
Only rank 0 reports: every rank learns the same outcome.
"""

from __future__ import annotations

import logging
import os

from perdure import secrecy
from perdure.runtime import goodput
from perdure.runtime.s3.retry import describe, positive_int

log = logging.getLogger("perdure.checkpoint")
ENV_ALERT_AFTER = "PERDURE_CHECKPOINT_ALERT_AFTER"
DEFAULT_ALERT_AFTER = 3


class SaveFailures:
    """Consecutive failed saves of one Checkpointer, and the last one's reason (``alert_after``
    None: $PERDURE_CHECKPOINT_ALERT_AFTER)."""

    def __init__(self, alert_after: int | None) -> None:
        self.alert_after = alert_after or positive_int(ENV_ALERT_AFTER, DEFAULT_ALERT_AFTER)
        self.consecutive = 0
        self.last_error: str | None = None

    @property
    def alerting(self) -> bool:
        return self.consecutive >= self.alert_after

    def failed(self, step: int, exc: BaseException, rank: int) -> None:
        """A save failed for good: count it, log it, report it (rank 0)."""
        self.consecutive += 1
        # Never a secret into a log or an event.
        self.last_error = secrecy.redact(str(exc) if str(exc) else describe(exc), os.environ)
        loud = self.alerting
        (log.error if loud else log.warning)(
            "checkpoint save of step %d failed (%d in a row%s); training goes on and the "
            "previous checkpoint stays the newest complete one: %s", step, self.consecutive,
            ", ALERT" if loud else "", self.last_error)
        if rank == 0:
            goodput.checkpoint_failed(step, self.consecutive, self.alert_after,
                                      self.last_error[:2000])

    def succeeded(self, step: int, rank: int) -> None:
        """A save committed: the run of failures (if any) is over."""
        if self.consecutive and rank == 0:
            log.warning("checkpoint save of step %d committed after %d failed save(s)", step,
                        self.consecutive)
            goodput.checkpoint_recovered(step, self.consecutive)
        self.consecutive, self.last_error = 0, None
