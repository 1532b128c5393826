"""The retry limit and how elastic_retry's mode follows the spec or an explicit argument."""

from __future__ import annotations

import pytest

from perdure.runtime.elastic import RetryLimit
from perdure.runtime.elastic.retry import FROM_SPEC, resolve_settings

ERR = RuntimeError("Connection reset by peer")
RESIZE2 = {"PERDURE_ELASTIC_MODE": "resize", "PERDURE_MIN_WORLD_SIZE": "2"}
PAUSE = {"PERDURE_ELASTIC_MODE": "pause", "PERDURE_MIN_WORLD_SIZE": "2"}


def test_retry_limit_allows_max_attempts_then_refuses_with_the_reason() -> None:
    limit = RetryLimit(max_attempts=2)
    assert [limit.decide(n, ERR).retry for n in (1, 2, 3)] == [True, True, False]
    assert limit.decide(1, ERR).reason == "lost peer, retry 1 of 2"
    refused = limit.decide(3, ERR).reason
    assert "after 2 retries" in refused and "Connection reset by peer" in refused


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_retry_limit_rejects_nonsense(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="max_attempts"):
        RetryLimit(max_attempts=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("env", "minimum", "mode", "source"), [
    (RESIZE2, 2, "resize", "spec"),
    (PAUSE, None, "pause", "spec"),
    ({}, None, "pause", "default"),  # no controller: wait for everyone
    ({"PERDURE_ELASTIC_MODE": "resize"}, None, "pause", "default"),  # not an elastic job
])
def test_defaults_come_from_the_spec(env: dict[str, str], minimum: int | None, mode: str,
                                     source: str) -> None:
    settings, warning = resolve_settings(FROM_SPEC, env)
    assert (settings.minimum, settings.mode, settings.source) == (minimum, mode, source)
    assert warning is None


def test_an_agreeing_argument_is_silent() -> None:
    assert resolve_settings(2, RESIZE2)[1] is None
    assert resolve_settings(None, PAUSE)[1] is None
    assert resolve_settings(3, {})[1] is None  # nothing to disagree with


@pytest.mark.parametrize(("argument", "env", "says"), [
    (None, RESIZE2, "resize (go on with at least 2)"),
    (3, RESIZE2, "resize (go on with at least 2)"),
    (2, PAUSE, "pause (wait for every replica)"),
])
def test_a_disagreeing_argument_wins_and_the_warning_names_both(
        argument: int | None, env: dict[str, str], says: str) -> None:
    settings, warning = resolve_settings(argument, env)
    assert settings.minimum == argument and settings.source == "argument"
    assert warning is not None
    assert f"minimum_replicas={argument!r}" in warning and f"job spec says {says}" in warning
    assert "PERDURE_MIN_WORLD_SIZE=2" in warning


@pytest.mark.parametrize("bad", [0, -2, 1.0, True])
def test_bad_minimum_is_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="minimum_replicas"):
        resolve_settings(bad, {})  # type: ignore[arg-type]


def test_bad_spec_environment_names_the_variable() -> None:
    with pytest.raises(ValueError, match="PERDURE_ELASTIC_MODE='grow'"):
        resolve_settings(FROM_SPEC, {"PERDURE_ELASTIC_MODE": "grow",
                                     "PERDURE_MIN_WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="PERDURE_MIN_WORLD_SIZE='two'"):
        resolve_settings(FROM_SPEC, {"PERDURE_ELASTIC_MODE": "resize",
                                     "PERDURE_MIN_WORLD_SIZE": "two"})
