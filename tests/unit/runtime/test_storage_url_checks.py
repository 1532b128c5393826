"""The runtime checks each storage URL it is handed, from the environment too (issue 36.5,
36.9): credentials, a scheme with a slash missing or a bucket S3 refuses fail at once, naming
where the URL came from and never quoting it."""

from __future__ import annotations

import pytest

from perdure.runtime.checkpoint.urls import make_storage
from perdure.runtime.data.sources import as_source

SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCY"


@pytest.mark.parametrize(("url", "needle"), [
    (f"s3://AKIA:{SECRET}@bucket/run", "holds credentials"),
    ("s3:/ckpt/x", "without '//' is a local path"),
    ("S3://bucket/x", "not written in lowercase"),
    ("s3://", "names no bucket"),
])
def test_a_bad_checkpoint_url_from_the_environment_fails_at_once(
        url: str, needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERDURE_CHECKPOINT_DIR", url)
    with pytest.raises(ValueError, match=needle) as err:
        make_storage(None)
    assert str(err.value).startswith("PERDURE_CHECKPOINT_DIR: ") and SECRET not in str(err.value)
    with pytest.raises(ValueError, match=needle):
        make_storage(url)
    with pytest.raises(ValueError, match=needle) as err:
        as_source(url)
    assert SECRET not in str(err.value)
