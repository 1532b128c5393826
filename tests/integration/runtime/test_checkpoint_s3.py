"""Checkpoints at s3://bucket/prefix against a real S3 API server (moto), through a proxy that
injects the faults object stores have: 500 and 503 SlowDown answers, dropped connections, an
answer cut in half, the server killed in the middle of an upload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers.s3server import S3, make_bucket
from torch import nn

from perdure.runtime.checkpoint import Checkpointer, SavePolicy
from perdure.runtime.s3.client import S3Client

BIG = 3 << 20  # float32 elements: a 12 MiB tensor, uploaded in two parts (5 MiB and the rest)


def _state(seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = nn.Linear(32, 32)
    return {"model": model, "big": torch.randn(BIG), "step": seed}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (all(torch.equal(x, y) for x, y in zip(a["model"].state_dict().values(),
                                                   b["model"].state_dict().values(), strict=True))
            and torch.equal(a["big"], b["big"]) and a["step"] == b["step"])


@pytest.fixture(autouse=True)
def _small_parts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PERDURE_S3_PART_MB", "5")
    monkeypatch.setenv("PERDURE_STAGING_DIR", str(tmp_path / "staging"))
    monkeypatch.delenv("PERDURE_REPORT_DIR", raising=False)


def _progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Send this process's progress records to a file, as perdure's local backend does."""
    from perdure.runtime import goodput

    report = tmp_path / "report"
    report.mkdir()
    monkeypatch.setattr(goodput, "_reporter", goodput.Reporter(report / "progress.jsonl"))
    return report / "progress.jsonl"


def _records(path: Path, kind: str) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [r for r in lines if r["kind"] == kind]


def test_saves_and_restores_through_the_aws_chain_with_multipart_and_retention(
    s3: S3, tmp_path: Path,
) -> None:
    ckpt = Checkpointer(s3.url("runs/x"), keep=2)
    assert type(ckpt.storage).__name__ == "S3Storage"
    for step in (1, 2, 3):
        ckpt.save(step, _state(step))
    ckpt.wait()
    assert ckpt.steps() == [2, 3]
    client = S3Client()
    shard = client.head(f"{s3.bucket}/runs/x/step-00000003/__0_0.distcp")
    assert shard is not None and shard[0] > 4 * BIG
    assert shard[1].endswith("-2")  # a multipart upload of two parts, its ETag checked
    assert any(m == "POST" and "uploadId=" in t for m, t, _ in s3.proxy.seen)

    # A save killed before its marker: objects without a commit marker are never loaded.
    client.put_bytes(f"{s3.bucket}/runs/x/step-00000009/__0_0.distcp", b"half a shard")
    back = _state(0)
    assert Checkpointer(s3.url("runs/x")).restore_latest(back) == 3
    assert _same(back, _state(3))
    ckpt.save(4, _state(4), blocking=True)
    assert ckpt.steps() == [3, 4]
    assert "step-00000009" not in client.list_names(f"{s3.bucket}/runs/x")
    assert not list((tmp_path / "staging").rglob("*.distcp"))


def test_transient_faults_are_retried_and_the_save_commits(s3: S3) -> None:
    s3.proxy.fail("503", times=2, method="PUT", path="partNumber=2")
    s3.proxy.fail("500", times=1, method="PUT", path="COMMITTED")
    s3.proxy.fail("drop", times=1, method="HEAD")
    s3.proxy.fail("cut", times=1, method="GET")
    s3.proxy.fail("503", times=2, method="GET")
    # The answer to the multipart completion lost after the server completed it: moto completes
    # it again (AWS answers NoSuchUpload, and then what the server holds decides).
    s3.proxy.fail("cut", times=1, method="POST", path="uploadId=")
    ckpt = Checkpointer(s3.url("faults"), keep=None)
    ckpt.save(5, _state(5), blocking=True)
    back = _state(0)
    assert ckpt.restore_latest(back) == 5 and _same(back, _state(5))
    assert sorted(s3.proxy.faults()) == ["500", "503", "503", "503", "503", "cut", "cut",
                                         "drop"]
    assert ckpt.failures.consecutive == 0


def test_a_save_that_fails_for_good_is_reported_and_training_goes_on(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    progress = _progress(tmp_path, monkeypatch)
    ckpt = Checkpointer(s3.url("down"), keep=2, policy=SavePolicy(every_steps=1),
                        alert_after=2)
    assert ckpt.maybe_save(1, _state(1))
    ckpt.wait()
    s3.proxy.fail("503", times=None, method="PUT")  # the store throttles every upload
    for step in (2, 3, 4):
        assert ckpt.maybe_save(step, _state(step))  # never raises: training goes on
        ckpt.wait()
    assert ckpt.failures.consecutive == 3 and ckpt.failures.alerting
    assert "SlowDown" in (ckpt.failures.last_error or "")
    assert ckpt.steps() == [1]  # the previous checkpoint stays the newest complete one
    s3.proxy.clear()
    assert ckpt.maybe_save(5, _state(5))
    ckpt.wait()
    assert ckpt.failures.consecutive == 0 and ckpt.steps() == [1, 5]
    failed = _records(progress, "checkpoint_failed")
    assert [(r["step"], r["consecutive"], r["alert_after"]) for r in failed] == [
        (2, 1, 2), (3, 2, 2), (4, 3, 2)]
    assert _records(progress, "checkpoint_committed") == [
        {**_records(progress, "checkpoint_committed")[0], "step": 5, "after_failures": 3}]
    text = progress.read_text() + str(ckpt.failures.last_error)
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in text
    assert s3.env["AWS_ACCESS_KEY_ID"] not in text


def test_server_killed_mid_upload_fails_that_save_only(s3_own: S3) -> None:
    ckpt = Checkpointer(s3_own.url("kill"), keep=None, policy=SavePolicy(every_steps=1))
    ckpt.maybe_save(1, _state(1))
    ckpt.wait()
    s3_own.proxy.fail("kill", times=1, method="PUT", path="partNumber=2")
    ckpt.maybe_save(2, _state(2))
    ckpt.wait()
    assert ckpt.failures.consecutive == 1
    assert s3_own.server.proc is None  # it really died, mid-upload
    s3_own.server.start()  # back, empty (moto keeps nothing): the bucket is made again

    make_bucket(s3_own.server.endpoint, s3_own.bucket)
    ckpt.maybe_save(3, _state(3))
    ckpt.wait()
    assert ckpt.failures.consecutive == 0 and ckpt.steps() == [3]
    back = _state(0)
    assert ckpt.restore_latest(back) == 3 and _same(back, _state(3))


def test_a_corrupt_newest_checkpoint_falls_back_to_the_one_before(s3: S3) -> None:
    ckpt = Checkpointer(s3.url("corrupt"), keep=None)
    for step in (1, 2):
        ckpt.save(step, _state(step), blocking=True)
    client = S3Client()
    path = f"{s3.bucket}/corrupt/step-00000002/__0_0.distcp"
    data = bytearray(client.cat(path))
    data[len(data) // 2] ^= 0xFF  # same size: only the checksums can tell
    client.put_bytes(path, bytes(data))
    back = _state(0)
    assert ckpt.restore_latest(back) == 1 and _same(back, _state(1))
    assert ckpt.restore_failures and "corrupt" in ckpt.restore_failures[0]


def test_retention_keeps_the_newest_complete_checkpoint_after_a_fallback(s3: S3) -> None:
    ckpt = Checkpointer(s3.url("keep"), keep=1)
    small = {"w": torch.zeros(8), "step": 0}
    for step in (10, 20, 30):
        small["w"].fill_(step)
        ckpt.save(step, small, blocking=True)
    assert ckpt.steps() == [30]
    back = {"w": torch.zeros(8), "step": -1}
    ckpt.restore(back, 30)
    ckpt.save(25, {"w": torch.full((8,), 25.0), "step": 25}, blocking=True)  # an older step
    assert ckpt.steps() == [25, 30]  # the newest complete one stays, with the one just saved
    assert ckpt.restore_latest(back) == 30 and bool((back["w"] == 30).all())


def test_bytes_the_server_stored_wrong_fail_the_save_never_commit_it(s3: S3) -> None:
    ckpt = Checkpointer(s3.url("verify"), keep=None)
    ckpt.save(1, _state(1), blocking=True)
    s3.proxy.fail("corrupt", times=1, method="PUT", path="partNumber=1")
    ckpt.save(2, _state(2))  # in the background: reported, training goes on
    ckpt.wait()
    assert ckpt.failures.consecutive == 1
    assert "holds other bytes than were sent" in str(ckpt.failures.last_error)
    assert ckpt.steps() == [1]
    ckpt.save(3, _state(3), blocking=True)
    assert ckpt.steps() == [1, 3]


def test_a_rename_on_s3_moves_every_object_below_it(s3: S3) -> None:
    """S3 has no rename: the storage copies server-side, then deletes (not atomic, which is why
    the commit protocol never renames there)."""
    from perdure.runtime.checkpoint.s3storage import S3Storage

    storage = S3Storage(s3.url("moves"))
    assert not storage.atomic_rename
    storage.write_bytes("a/x.bin", b"x" * 10)
    storage.write_bytes("a/deep/y.bin", b"y" * 20)
    storage.rename("a", "b")
    assert storage.sizes("b") == {"x.bin": 10}
    assert storage.sizes("b/deep") == {"y.bin": 20}
    assert storage.sizes("a") == {} and storage.size("a/x.bin") is None
    storage.close()
