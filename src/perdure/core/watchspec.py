"""The spec's `watchdog` section: when a job counts as hung, what to do about stragglers.

No side effects.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from perdure.core.specbase import FLOAT_LIMIT, SpecModel


class WatchdogSpec(SpecModel):
    """Hung-job and straggler detection from the ranks' progress reports."""

    hang_seconds: Literal["auto"] | float = Field("auto", description=(
        "no rank advances this long: HANG (`auto`: max(120, 20 x the p99 step time))"))
    stragglers: Literal["report", "drain", "off"] = Field("report", description=(
        "what to do with a replica much slower than the others"))

    @field_validator("hang_seconds", mode="before")
    @classmethod
    def _hang(cls, v: object) -> object:
        if v == "auto":
            return v
        # Checked here, not by the base's bounds: a union's errors would name each member.
        if (isinstance(v, bool) or not isinstance(v, int | float)
                or not 0 < v <= FLOAT_LIMIT):
            raise ValueError(f"use auto or a number of seconds > 0, finite and at most "
                             f"{FLOAT_LIMIT:g}")
        return float(v)


class IntervalFields(SpecModel):
    """The interval fields of the spec's `checkpoint` section (CheckpointSpec inherits them)."""

    every: Literal["auto"] | None = Field(None, description=(
        "`auto`: the interval from data (Young/Daly)"))
    every_seconds: float | None = Field(None, gt=0, description="save every S seconds")
    # The service guidance: at least one checkpoint every 4 hours.
    max_interval_seconds: float = Field(14400.0, gt=0, description=(
        "never longer than this between checkpoints"))

    @model_validator(mode="after")
    def _one_way(self) -> IntervalFields:
        given = [n for n in ("every", "every_steps", "every_seconds")
                 if getattr(self, n, None) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of every: auto, every_steps, every_seconds; got "
                             f"{' and '.join(given)}")
        return self
