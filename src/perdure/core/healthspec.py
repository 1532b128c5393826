"""The cluster file's `health` section: when a node is fenced, and the check it must pass.

No side effects. Defaults: 2 failures in a week. At the Llama 3 run's rates (419 interruptions
in 54 days on 2,048 nodes) a node fails about once in 260 days, so two in a week is rare for a
healthy one and common for a repeat offender (docs/guides/node-health.md; `perdure sim --failures
llama3-lemons` shows the trade).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from perdure.core.specbase import SpecModel

DEFAULT_MAX_FAILURES = 2
DEFAULT_WINDOW_SECONDS = 7 * 86400.0
DEFAULT_TIMEOUT_SECONDS = 120.0


class HealthSpec(SpecModel):
    """Node health: the quarantine limit (0 = never fence) and the optional preflight check."""

    max_node_failures: int = Field(default=DEFAULT_MAX_FAILURES, ge=0, description=(
        "machine failures within the window that quarantine a node (0: never)"))
    window_seconds: float = Field(default=DEFAULT_WINDOW_SECONDS, gt=0, description=(
        "how long a failure counts against its node"))
    preflight: list[str] = Field(default_factory=list, description=(
        "argv run on a node before an attempt's replicas start there (e.g. `[perdure, "
        "health-check]`); a failure quarantines it"))
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0, description=(
        "a preflight that runs longer fails"))

    @field_validator("preflight")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if any(not word for word in v):
            raise ValueError("an argv of non-empty words, e.g. [perdure, health-check]; "
                             "empty (the default) runs no preflight")
        return v
