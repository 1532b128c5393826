"""Offline checks of an exported JobSet against published schemas, strict (unknown fields
rejected, as the API server's strict field validation does): every Job template against
Kubernetes' OpenAPI schemas (`kubernetes-validate`, the `k8s` extra), and the whole JobSet
against the openAPIV3Schema of a JobSet CRD the user supplies (`--crd`, through `jsonschema`).

No side effects beyond reading the packages' own schema files.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from perdure.core import yamlload
from perdure.export.gaps import ExportError

# The oldest Kubernetes release where every field perdure emits is GA (Job successPolicy: 1.33).
K8S_VERSION = "1.33"
JOBSET_GROUP, JOBSET_VERSION = "jobset.x-k8s.io", "v1alpha2"
INSTALL = "pip install 'perdure[k8s]'"


def schemas_available() -> bool:
    """Whether Kubernetes' schemas are installed (the optional `k8s` extra)."""
    return importlib.util.find_spec("kubernetes_validate") is not None


def path_of(loc: list[Any]) -> str:
    """`spec.replicatedJobs[0].template` from a location ("spec", "replicatedJobs", 0, ...)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(err: Any) -> str:
    """`path: what` for a jsonschema error, down to the unknown field when that is the error."""
    loc = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = err.schema.get("properties", {})
        unknown = sorted(k for k in err.instance if k not in known)
        if unknown:
            return f"{path_of([*loc, unknown[0]])}: unknown field"
    return f"{path_of(loc)}: {err.message}"


def _first(errors: Iterable[Any]) -> Any | None:
    return min(errors, key=lambda e: (len(list(e.absolute_path)), str(list(e.absolute_path))),
               default=None)


def check_job_templates(jobset: dict[str, Any]) -> None:
    """Check each Job template against Kubernetes' schemas."""
    import kubernetes_validate as kv

    for i, rj in enumerate(jobset["spec"]["replicatedJobs"]):
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": rj["name"]},
               "spec": rj["template"]["spec"]}
        try:
            kv.validate(job, K8S_VERSION, strict=True)
        except kv.ValidationError as exc:
            raise ExportError(f"JobSet spec.replicatedJobs[{i}].template.{_describe(exc)} "
                              f"(Kubernetes {K8S_VERSION}'s Job schema)") from None


def crd_schema(text: str, source: str) -> dict[str, Any]:
    """The JobSet v1alpha2 openAPIV3Schema in a CRD file (which may hold other documents)."""
    try:
        docs = [d for d in yamlload.load_all(text, yamlload.CRD) if isinstance(d, dict)]
    except yamlload.YamlError as exc:
        first = str(exc).splitlines()[0]
        raise ExportError(f"--crd {source}: not valid YAML: {first}") from None
    for doc in docs:
        spec = doc.get("spec") or {}
        if doc.get("kind") != "CustomResourceDefinition" or spec.get("group") != JOBSET_GROUP:
            continue
        for version in spec.get("versions") or []:
            schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
            if version.get("name") == JOBSET_VERSION and isinstance(schema, dict):
                return schema
        raise ExportError(f"--crd {source}: the JobSet CRD has no {JOBSET_VERSION} version with "
                          "an openAPIV3Schema; use the CRD of JobSet v0.10 or later")
    raise ExportError(f"--crd {source}: no CustomResourceDefinition of group {JOBSET_GROUP}; "
                      "pass JobSet's CRD (jobset.x-k8s.io_jobsets.yaml)")


def closed(schema: Any) -> Any:
    """`schema` with unknown fields rejected wherever it lists the fields and keeps no others."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in _SUBSCHEMAS else v for k, v in schema.items()}
    if "properties" in out:
        out["properties"] = {k: closed(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    return out


_SUBSCHEMAS = frozenset({"items", "additionalProperties", "allOf", "anyOf", "oneOf", "not"})


def check_against_crd(jobset: dict[str, Any], schema: dict[str, Any], source: str) -> None:
    """Raise ExportError naming the first field of the JobSet that the CRD's schema rejects."""
    try:
        import jsonschema
    except ImportError:
        raise ExportError(f"--crd needs the jsonschema package: {INSTALL}") from None
    validator = jsonschema.Draft7Validator(closed(schema))
    err = _first(validator.iter_errors(jobset))
    if err is not None:
        raise ExportError(f"--crd {source}: JobSet {_describe(err)}")


def validate_export(
    documents: list[dict[str, Any]], crd_text: str | None = None, crd_source: str = "--crd"
) -> list[str]:
    """Every offline check, in order; raise ExportError on the first failure.

    Returns notes on checks that could not run (Kubernetes' schemas not installed).
    """
    jobset = documents[-1]
    notes = []
    if schemas_available():
        check_job_templates(jobset)
    else:
        notes.append(f"the Job templates were not checked against Kubernetes' schemas: {INSTALL}")
    if crd_text is not None:
        check_against_crd(jobset, crd_schema(crd_text, crd_source), crd_source)
    return notes
