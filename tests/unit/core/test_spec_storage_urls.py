"""Storage URLs and addresses of a spec or cluster file, checked at validate (issue 36.5, 36.9):
credentials in a URL are refused without being echoed, and a URL whose scheme or bucket is
wrong is refused before launch instead of writing to `./s3:/...` or failing on the nodes."""

from __future__ import annotations

import json

import pytest

from perdure.core.clusterspec import parse_cluster
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"
TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


def spec(where: str) -> str:
    return (f"name: x\npools: [{{name: w, command: [python, t.py]}}]\n"
            f"checkpoint: {{dir: {json.dumps(where)}}}\n")


def refused_spec(where: str) -> str:
    with pytest.raises(SpecError) as err:
        parse_job_spec(spec(where), "job.yaml")
    return str(err.value)


@pytest.mark.parametrize("where", [
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/run",
    f"s3://AKIAEXAMPLE:{SECRET}@bucket",
    f"gs://user:{SECRET}@bucket/run",
    f"file://me:{SECRET}@localhost/ckpt",
    f"s3://{TOKEN}@bucket/run",
    f"simplecache::s3://key:{SECRET}@bucket/run",
])
def test_credentials_in_the_checkpoint_url_are_refused_and_never_shown(where: str) -> None:
    message = refused_spec(where)
    lines = message.splitlines()
    assert lines[1].startswith("  checkpoint.dir: holds credentials"), message
    assert "environment" in lines[1] and len(lines) == 2
    assert SECRET not in message and "AKIAEXAMPLE" not in message and TOKEN not in message
    assert SECRET[:8] not in message


def test_a_url_that_may_hold_a_secret_is_never_echoed() -> None:
    """A secret with '/' before '@' reads as a bucket and a key: refused as a bad bucket,
    and neither the bucket nor the URL shown."""
    message = refused_spec(f"s3://{SECRET}@bucket/run")
    assert "the bucket name is not valid" in message and SECRET[:8] not in message, message


@pytest.mark.parametrize(("where", "needle"), [
    ("s3:/ckpt/x", "s3: without '//' is a local path"),
    ("s3:ckpt/x", "s3: without '//' is a local path"),
    ("S3://bucket/run", "not written in lowercase: write s3://"),
    ("s3://", "names no bucket"),
    ("s3:///run", "names no bucket"),
    ("s3://b/run", "the bucket name is not valid"),
    ("s3://My_Bucket/run", "the bucket name is not valid"),
    ("s3://bucket../run", "the bucket name is not valid"),
    ("s3://192.168.1.1/run", "the bucket name is not valid"),
    ("gs:///run", "names no bucket"),
    ("hdfs://namenode/ckpt", "hdfs:// is not a storage perdure can write to"),
    ("ftp:/x", "ftp: without '//'"),
])
def test_a_storage_url_with_a_bad_scheme_or_bucket_is_refused(where: str, needle: str) -> None:
    message = refused_spec(where)
    assert message.count("\n") == 1 and "checkpoint.dir: " in message and needle in message, \
        message


@pytest.mark.parametrize("where", [
    "./checkpoints", "/abs/ckpt", "file:///abs/ckpt", "s3://my-bucket", "s3://my.bucket-1/a/b",
    "gs://bucket_1/x", "memory://ckpt", "s3://bucket/$(PERDURE_POD_INDEX)/x", "ckpt:v2",
])
def test_good_storage_locations_pass(where: str) -> None:
    assert parse_job_spec(spec(where)).checkpoint.dir == where


@pytest.mark.parametrize("text", [
    f"backend: ray\nray: {{address: 'ray://admin:{SECRET}@head:10001'}}\n",
    f"address: 'http://admin:{SECRET}@head:8265'\n",
])
def test_credentials_in_a_cluster_address_are_refused_and_never_shown(text: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_cluster(text, "cluster.yaml")
    message = str(err.value)
    assert "address: holds credentials" in message and SECRET not in message, message


def test_a_credential_url_in_any_other_refused_value_is_hidden() -> None:
    """Any field's refused value is shown cut short with its credentials hidden."""
    text = (f"name: x\npools: [{{name: w, command: [t], "
            f"replicas: 'https://u:{SECRET}@host/x'}}]\n")
    with pytest.raises(SpecError) as err:
        parse_job_spec(text)
    assert "pools.0.replicas" in str(err.value) and SECRET not in str(err.value)
    assert "https://***@host/x" in str(err.value)
