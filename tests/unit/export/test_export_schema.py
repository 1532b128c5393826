"""Offline validation: a field a schema lacks fails with its path, in Kubernetes' Job schema
and in a JobSet CRD; bad flags and CRD files name themselves."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError
from perdure.export.gaps import ExportError
from perdure.export.k8s import K8sOptions, export_k8s
from perdure.export.k8s_schema import (
    check_against_crd,
    check_job_templates,
    closed,
    crd_schema,
    validate_export,
)

HERE = Path(__file__).parent
CRD_TEXT = (HERE / "jobset-crd.yaml").read_text()
SPEC = parse_job_spec((HERE / "specs" / "two_pools.yaml").read_text())
CONTAINER = ["spec", "replicatedJobs", 1, "template", "spec", "template", "spec", "containers", 0]


def jobset() -> dict[str, Any]:
    return copy.deepcopy(export_k8s(SPEC, K8sOptions("ghcr.io/acme/train:1.0")).jobset)


def with_field(path: list[str | int], key: str, value: Any = 1) -> dict[str, Any]:
    doc = jobset()
    node = doc
    for part in path:
        node = node[part]
    node[key] = value
    return doc


def crd_check(doc: dict[str, Any], text: str = CRD_TEXT) -> None:
    check_against_crd(doc, crd_schema(text, "crd.yaml"), "crd.yaml")


def k8s_check(doc: dict[str, Any]) -> None:
    check_job_templates(doc)


UNKNOWN = [  # (where, field, its path in the error)
    (["spec", "failurePolicy"], "maxRetries", "spec.failurePolicy.maxRetries"),
    (["spec", "replicatedJobs", 0, "template", "spec"], "podFailurePolicyy",
     "spec.replicatedJobs[0].template.spec.podFailurePolicyy"),
    (CONTAINER, "cpuLimit", "spec.replicatedJobs[1].template.spec.template.spec.containers[0]"
     ".cpuLimit"),
]


@pytest.mark.parametrize(("where", "field", "path"), UNKNOWN[1:])
def test_kubernetes_job_schema_rejects_an_unknown_field_with_its_path(
    where: list[str | int], field: str, path: str
) -> None:
    pytest.importorskip("kubernetes_validate")
    with pytest.raises(ExportError) as err:
        k8s_check(with_field(where, field))
    assert f"JobSet {path}: unknown field" in str(err.value)


@pytest.mark.parametrize(("where", "field", "path"), UNKNOWN[:2])
def test_the_crd_rejects_an_unknown_field_with_its_path(
    where: list[str | int], field: str, path: str
) -> None:
    pytest.importorskip("jsonschema")
    with pytest.raises(ExportError, match=rf"^--crd crd.yaml: JobSet {re.escape(path)}: unknown"):
        crd_check(with_field(where, field))


def test_wrong_types_and_values_name_their_path() -> None:
    pytest.importorskip("kubernetes_validate")
    with pytest.raises(ExportError, match=r"containers\[0\].resources.requests.cpu"):
        k8s_check(with_field([*CONTAINER, "resources", "requests"], "cpu", [1]))


def test_a_crd_without_message_patterns_names_the_field() -> None:
    """An older JobSet CRD: the export's rules need onJobFailureMessagePatterns."""
    pytest.importorskip("jsonschema")
    crd = yaml.safe_load(CRD_TEXT)
    rule = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["failurePolicy"]["properties"]["rules"]["items"]
    del rule["properties"]["onJobFailureMessagePatterns"]
    with pytest.raises(ExportError, match=r"spec.failurePolicy.rules\[0\]"
                       r".onJobFailureMessagePatterns: unknown field"):
        crd_check(jobset(), yaml.safe_dump(crd))


@pytest.mark.parametrize(("text", "says"), [
    ("a: [", "not valid YAML"),
    ("kind: ConfigMap\n", "no CustomResourceDefinition of group jobset.x-k8s.io"),
    ("kind: CustomResourceDefinition\nspec: {group: jobset.x-k8s.io, versions: "
     "[{name: v1alpha1}]}\n", "no v1alpha2 version"),
])
def test_bad_crd_files_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ExportError, match=says):
        crd_schema(text, "crd.yaml")


def test_closed_keeps_fields_the_schema_leaves_open() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "string"}}},
        "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"c": {}}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
    }}
    out = closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]["open"]
    assert out["properties"]["m"]["additionalProperties"] == {"type": "string"}


@pytest.mark.skipif(not os.environ.get("PERDURE_JOBSET_CRD"),
                    reason="set PERDURE_JOBSET_CRD to JobSet's released CRD file")
def test_against_jobsets_released_crd() -> None:
    text = Path(os.environ["PERDURE_JOBSET_CRD"]).read_text()
    examples = sorted((HERE.parents[2] / "examples").glob("*/job.yaml"))
    for path in [*examples, HERE / "specs" / "two_pools.yaml"]:
        result = export_k8s(parse_job_spec(path.read_text()), K8sOptions("img"))
        validate_export(result.documents, text, "jobset CRD")
    with pytest.raises(ExportError, match=r"spec\.failurePolicy\.maxRetries: unknown field"):
        crd_check(with_field(["spec", "failurePolicy"], "maxRetries"), text)


@pytest.mark.parametrize(("opts", "says"), [
    ({"image": "Ghcr.io/Acme/Train"}, "--image 'Ghcr.io/Acme/Train': not a container image"),
    ({"image": "acme/train:"}, "--image"),
    ({"image": "acme train"}, "--image"),
    ({"image": ""}, "--image"),
    ({"image": "x", "queue": "Team_A"}, "--queue 'Team_A'"),
    ({"image": "x", "namespace": "ml.prod"}, "--namespace 'ml.prod'"),
    ({"image": "x", "priority_class": "-high"}, "--priority-class '-high'"),
])
def test_bad_flags_name_themselves(opts: dict[str, str], says: str) -> None:
    with pytest.raises(ExportError, match=says.replace("(", r"\(")):
        export_k8s(SPEC, K8sOptions(**opts))


@pytest.mark.parametrize("image", [
    "train", "acme/train:1.0", "ghcr.io/acme/train:1.0-cpu", "localhost:5000/train",
    "registry.example.com:443/a/b/c:v2", "acme/train@sha256:" + "a" * 64,
    "acme/train:1.0@sha256:" + "0" * 64,
])
def test_good_images_pass(image: str) -> None:
    assert export_k8s(SPEC, K8sOptions(image)).jobset


def test_spec_values_kubernetes_cannot_take_are_errors() -> None:
    fits = parse_job_spec("name: " + "a" * 35 + "\npools: [{name: " + "w" * 15
                          + ", replicas: 10, command: [python]}]\n")
    assert export_k8s(fits, K8sOptions("x")).jobset  # 35+1+15+4+6 = 61
    long = parse_job_spec("name: " + "a" * 40 + "\npools: [{name: " + "w" * 15
                          + ", replicas: 10, command: [python]}]\n")
    with pytest.raises(ExportError, match=r"pools.0.name: the pod name .* would have 66 char"):
        export_k8s(long, K8sOptions("x"))
    digit = parse_job_spec("name: 7b\npools: [{name: w, command: [python]}]\n")
    with pytest.raises(ExportError, match="name '7b': a JobSet's name must start with a letter"):
        export_k8s(digit, K8sOptions("x"))
    queue = parse_job_spec("name: x\nqueue: Big Queue\npools: [{name: w, command: [python]}]\n")
    with pytest.raises(ExportError, match=r"queue 'Big Queue'.*pass --queue"):
        export_k8s(queue, K8sOptions("x"))
    assert export_k8s(queue, K8sOptions("x", queue="big")).jobset
    # A priority Kueue's int32 cannot hold never reaches the export: the spec refuses it.
    with pytest.raises(SpecError, match="priority: must be between"):
        parse_job_spec("name: x\npriority: 3000000000\npools: [{name: w, command: [python]}]\n")
