"""The failure table on Ray: the local backend's failure-policy tests, run on the Ray hosts.

The same test functions as tests/integration/controller/test_failure_policy.py (which run them
on the local backend), given a perdure whose `run` goes to the Ray cluster: exit codes,
transient codes, abort, uncaught exception, OOM over memory_mb, primary success.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from raytest import RayPerdure

_path = Path(__file__).resolve().parents[1] / "controller" / "test_failure_policy.py"
_spec = importlib.util.spec_from_file_location("perdure_failure_policy_cases", _path)
assert _spec is not None and _spec.loader is not None
policy: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy)

# One launch: in the default suite (the table itself runs on the local backend there).
QUICK = ["test_uncaught_exception_fails_at_once_with_reason"]
# Up to 24 launches (an actor each): `make test-ray`.
LONG = ["test_over_memory_limit_fails_out_of_memory",
        "test_exit_1_twice_then_0_succeeds_with_two_restarts",
        "test_always_exit_3_fails_after_restarts_and_retries",
        "test_exit_134_retries_the_job",
        "test_traceback_without_runtime_is_recognised",
        "test_primary_exit_0_stops_the_others"]


def _case(name: str) -> Callable[[RayPerdure], None]:
    fn: Callable[[RayPerdure], None] = getattr(policy, name)
    return fn


@pytest.mark.parametrize("name", QUICK)
def test_failure_table_on_ray(ray_perdure: RayPerdure, name: str) -> None:
    _case(name)(ray_perdure)


@pytest.mark.ray_long
@pytest.mark.parametrize("name", LONG)
def test_failure_table_on_ray_long(ray_perdure: RayPerdure, name: str) -> None:
    _case(name)(ray_perdure)
