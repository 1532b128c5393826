"""How `elastic_retry` decides: the retry limit, the elastic mode, and the events it reports.

No side effects. The mode comes from the job spec (PERDURE_ELASTIC_MODE,
PERDURE_MIN_WORLD_SIZE); an explicit `minimum_replicas` overrides it, with a warning.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "FROM_SPEC",
    "ElasticEvent",
    "ElasticSettings",
    "FromSpec",
    "RetryDecision",
    "RetryLimit",
    "resolve_settings",
]

MODES = ("resize", "pause")


class FromSpec(enum.Enum):
    """The default of `minimum_replicas`: take it from the job spec (the environment)."""

    FROM_SPEC = "FROM_SPEC"

    def __repr__(self) -> str:
        return "FROM_SPEC"


FROM_SPEC: Final = FromSpec.FROM_SPEC


@dataclass(frozen=True)
class RetryDecision:
    """Whether to rebuild the group and re-enter the loop, and why."""

    retry: bool
    reason: str


@dataclass(frozen=True)
class RetryLimit:
    """Re-enter the loop after at most `max_attempts` lost peers, then let the error propagate.

    Planned changes (a replica came back and the group grows at a step boundary) are not
    counted: only losses are.
    """

    max_attempts: int = 10

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"RetryLimit(max_attempts={self.max_attempts!r}) must be an int")
        if self.max_attempts < 0:
            raise ValueError(
                f"RetryLimit(max_attempts={self.max_attempts}) must be >= 0 (0 never retries)"
            )

    def decide(self, attempt: int, error: BaseException) -> RetryDecision:
        """`attempt` is the number of this retry (1 for the first loss)."""
        if attempt <= self.max_attempts:
            return RetryDecision(True, f"lost peer, retry {attempt} of {self.max_attempts}")
        return RetryDecision(
            False,
            f"lost peer again after {self.max_attempts} retries "
            f"(RetryLimit(max_attempts={self.max_attempts})): {type(error).__name__}: {error}",
        )


@dataclass(frozen=True)
class ElasticSettings:
    """What the loop waits for after a loss: `minimum` members (resize) or all (pause: None)."""

    minimum: int | None
    source: str  # "spec", "argument" or "default", for messages

    @property
    def mode(self) -> str:
        return "pause" if self.minimum is None else "resize"


@dataclass(frozen=True)
class ElasticEvent:
    """One membership change, as `on_elastic_event` receives it (after the group is rebuilt)."""

    kind: str  # "lost": a peer failed mid-step; "changed": a planned change at a step boundary
    previous_round: int | None
    round: int
    previous_world_size: int
    world_size: int
    reason: str  # the round's reason, as the controller wrote it
    error: str | None  # the error that revealed the loss ("lost" only)
    waited_s: float  # from the loss (or the decision to change) to the rebuilt group
    retry: int  # losses handled so far by this elastic_retry


def _spec_settings(env: Mapping[str, str]) -> ElasticSettings | None:
    """The job spec's elastic settings from the controller's environment; None without any."""
    mode = env.get("PERDURE_ELASTIC_MODE", "")
    raw_min = env.get("PERDURE_MIN_WORLD_SIZE", "")
    if not raw_min:  # only elastic jobs get a minimum; PERDURE_ELASTIC_MODE alone says nothing
        return None
    if mode not in MODES:
        raise ValueError(
            f"PERDURE_ELASTIC_MODE={mode!r} is not one of {MODES}; it is set by perdure from "
            "the spec's elastic.mode. Fix the spec or unset the variable."
        )
    try:
        minimum = int(raw_min)
    except ValueError:
        raise ValueError(
            f"PERDURE_MIN_WORLD_SIZE={raw_min!r} is not an integer; it is set by perdure from "
            "the spec's min_replicas."
        ) from None
    return ElasticSettings(minimum if mode == "resize" else None, "spec")


def _describe(s: ElasticSettings) -> str:
    if s.minimum is None:
        return "pause (wait for every replica)"
    return f"resize (go on with at least {s.minimum})"


def resolve_settings(
    argument: int | FromSpec | None, env: Mapping[str, str]
) -> tuple[ElasticSettings, str | None]:
    """The settings for `elastic_retry(minimum_replicas=argument)`, and a warning when an
    explicit argument overrides a different spec."""
    spec = _spec_settings(env)
    if isinstance(argument, FromSpec):
        return (spec or ElasticSettings(None, "default")), None
    if argument is not None and (isinstance(argument, bool) or not isinstance(argument, int)
                                 or argument < 1):
        raise ValueError(
            f"minimum_replicas={argument!r} must be an int >= 1 (resize mode) or None (pause "
            "mode: wait for every replica); leave it out to follow the job spec."
        )
    chosen = ElasticSettings(argument, "argument")
    if spec is None or spec.minimum == chosen.minimum:
        return chosen, None
    warning = (
        f"elastic_retry(minimum_replicas={argument!r}) means {_describe(chosen)}, but the job "
        f"spec says {_describe(spec)} (PERDURE_ELASTIC_MODE={env.get('PERDURE_ELASTIC_MODE')}, "
        f"PERDURE_MIN_WORLD_SIZE={env.get('PERDURE_MIN_WORLD_SIZE')}). The argument wins in "
        "this process; the controller follows the spec. Make them agree, or drop the argument."
    )
    return chosen, warning
