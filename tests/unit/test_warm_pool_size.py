"""The warm pool's size: a number, or "auto" (grown to the largest group launched together)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perdure.backends.node import pool as pool_mod
from perdure.backends.node import warm


def test_pool_size_parses_numbers_and_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(warm.POOL_ENV, raising=False)
    assert warm.pool_size(None) == warm.AUTO
    assert warm.pool_size(3) == 3
    assert warm.pool_size("0") == 0
    monkeypatch.setenv(warm.POOL_ENV, "5")
    assert warm.pool_size(None) == 5
    monkeypatch.setenv(warm.POOL_ENV, "lots")
    with pytest.raises(ValueError, match=r"'lots' .*PERDURE_WARM_POOL.* or 'auto'"):
        warm.pool_size(None)


def test_auto_pool_grows_to_the_largest_group_up_to_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(pool_mod.time, "monotonic", lambda: clock[0])
    p = pool_mod.Pool(warm.AUTO, str(tmp_path))
    assert p.size == warm.DEFAULT_POOL
    for _ in range(4):  # a job's 4 replicas, launched together
        p._grow()
        clock[0] += 0.1
    assert p.size == 4
    clock[0] += pool_mod.GROUP_GAP + 1
    p._grow()  # a lone relaunch later does not shrink it
    assert p.size == 4
    for _ in range(20):
        p._grow()
    assert p.size == warm.AUTO_MAX

    fixed = pool_mod.Pool(2, str(tmp_path))
    for _ in range(6):
        fixed._grow()
    assert fixed.size == 2
