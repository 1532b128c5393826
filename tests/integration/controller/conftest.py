"""The `perdure` fixture: a harness on the test's own state dir, its processes killed after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.harness import Perdure, kill_leftovers


@pytest.fixture
def perdure(tmp_path: Path) -> Iterator[Perdure]:
    p = Perdure(tmp_path)
    yield p
    kill_leftovers(p.state)

