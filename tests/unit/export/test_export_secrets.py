"""Credentials in an exported JobSet (issue 36.6): a variable whose name says it holds one, or
whose value is a URL with user:password@, is read from a Secret (secretKeyRef) and the export
warns; its value is never written into the manifest."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_export_k8s import IMAGE, spec_of

from perdure.export.k8s import K8sOptions, credential_gaps, export_k8s, to_yaml

VALUE = "s3cr3t-VALUE-0123456789"


def containers(text: str) -> list[dict[str, Any]]:
    jobset = export_k8s(spec_of(text), K8sOptions(IMAGE)).jobset
    return [rj["template"]["spec"]["template"]["spec"]["containers"][0]
            for rj in jobset["spec"]["replicatedJobs"]]


@pytest.mark.parametrize(("name", "value"), [
    ("WANDB_API_KEY", VALUE),
    ("OPENAI_API_KEY", VALUE),
    ("AZURE_STORAGE_KEY", VALUE),
    ("AZURE_STORAGE_CONNECTION_STRING", f"DefaultEndpointsProtocol=https;AccountKey={VALUE}"),
    ("HF_TOKEN", VALUE),
    ("DB_PASSWORD", VALUE),
    ("AWS_SECRET_ACCESS_KEY", VALUE),
    ("AWS_ENDPOINT_URL", f"https://minio:{VALUE}@minio.internal:9000"),
    ("DATABASE_URL", f"postgres://app:{VALUE}@db:5432/runs"),
])
def test_a_credential_is_read_from_a_secret_and_never_written(name: str, value: str) -> None:
    text = f"env: {{{name}: {json.dumps(value)}}}\n"
    for container in containers(text):
        entry = next(e for e in container["env"] if e["name"] == name)
        assert entry == {"name": name, "valueFrom": {"secretKeyRef": {
            "name": "x-credentials", "key": name}}}
    result = export_k8s(spec_of(text), K8sOptions(IMAGE))
    assert VALUE not in to_yaml(result.documents)
    warned = credential_gaps(spec_of(text))
    assert len(warned) == 1 and name in warned[0].message and VALUE not in warned[0].message


@pytest.mark.parametrize(("name", "value"), [
    ("WANDB_PROJECT", "my-project"), ("AWS_ENDPOINT_URL", "http://minio.internal:9000"),
    ("HF_HOME", "/data/hf"), ("KEYBOARD", "us"),
])
def test_plain_settings_stay_plain_values(name: str, value: str) -> None:
    text = f"env: {{{name}: {json.dumps(value)}}}\n"
    for container in containers(text):
        assert {"name": name, "value": value} in container["env"]
    assert credential_gaps(spec_of(text)) == []
