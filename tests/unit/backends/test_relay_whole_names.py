"""Names the relay takes from the network are checked whole (issue 36.8): a trailing newline
no longer passes `$`."""

from __future__ import annotations

from pathlib import Path

import pytest

from perdure.backends.relay.kv import KVError, Stores


@pytest.mark.parametrize("name", ["store\n", "a/b", "", "x" * 129])
def test_a_store_name_is_checked_whole(tmp_path: Path, name: str) -> None:
    with pytest.raises(KVError, match="is not allowed"):
        Stores(tmp_path).get("job", name)
    assert not list(tmp_path.rglob("*.jsonl"))
