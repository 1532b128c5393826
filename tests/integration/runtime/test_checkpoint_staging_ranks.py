"""Two ranks on one host staging saves for a remote store: each stages in a directory of its
own (named after the checkpoint URL, the job, its attempt and the rank), never in a shared one
that one rank's cleanup empties under the other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SAVES = 6


def test_two_ranks_on_one_host_stage_apart_and_every_save_commits(
    run_ranks: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What perdure's local backend gives two replicas of one job on one node (the ranks
    # inherit it); `local://` is fsspec's local file system without rename: saves are staged
    # and uploaded, as to a bucket.
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("PERDURE_JOB_ID", "stage-1")
    monkeypatch.setenv("PERDURE_ATTEMPT", "1")
    monkeypatch.setenv("PERDURE_STAGING_DIR", str(tmp_path / "staging"))
    results = run_ranks("staging", 2, {"url": f"local://{tmp_path}/ckpt", "saves": SAVES})
    assert [r["steps"] for r in results] == [[SAVES - 1, SAVES]] * 2
    assert results[0]["staging"] != results[1]["staging"]
    for rank, r in enumerate(results):
        name = Path(r["staging"]).name
        assert name.startswith("stage-1-a1-") and name.endswith(f"-rank{rank}")
    assert not list((tmp_path / "staging").rglob("*.distcp"))  # uploads leave nothing behind
