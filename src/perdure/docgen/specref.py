"""The spec reference: every job-spec and cluster-file field, generated from the models.

A field's description is its pydantic `description=` (a field without one shows as
undocumented, and a test fails on it). No side effects.
"""

from __future__ import annotations

import json
import types
import typing
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from perdure.core.clusterspec import ClusterSpec
from perdure.core.spec import JobSpec
from perdure.core.specbase import model_in

UNDOCUMENTED = "(undocumented)"


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(a) for a in typing.get_args(annotation)
               if typing.get_origin(annotation) in (typing.Union, types.UnionType))


def type_name(annotation: Any) -> str:
    """The annotation as a user writes the value: `int`, `list[int]`, `"a" \\| "b"`, `map`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args)
    if origin is list:
        return f"list[{type_name(args[0])}]"
    if origin is dict:
        return f"map[{type_name(args[0])}, {type_name(args[1])}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(json.dumps(m.value) for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "length ≥"),
           ("max_length", "length ≤"))


def bounds_text(info: FieldInfo) -> str:
    """The field's bounds as written in its Field (`≥ 1`), from pydantic's metadata."""
    out = []
    for item in info.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return ", ".join(out)


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see below"
    if value is None or value is PydanticUndefined:
        return "none"
    return "`" + json.dumps(_plain(value)) + "`"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return getattr(value, "value", value)


def rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(path, type, default, description) of every field of `model`, nested fields after
    their parent, `[]` marking a list's items."""
    out = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        desc = info.description or UNDOCUMENTED
        bounds = bounds_text(info)
        kind = type_name(info.annotation) + (f" ({bounds})" if bounds else "")
        out.append((path, kind, default_text(info), desc))
        inner = model_in(info.annotation)
        if inner is not None:
            out += rows(inner, f"{path}[]." if _is_list(info.annotation) else f"{path}.")
    return out


def table(model: type[BaseModel]) -> str:
    lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    lines += [f"| `{p}` | {t} | {d} | {x} |" for p, t, d, x in rows(model)]
    return "\n".join(lines)


def reference() -> str:
    """The job spec's and the cluster file's tables."""
    return "\n".join([
        "**Job spec** (`perdure validate`, `run`, `submit`, `POST /api/v1/jobs`):",
        "",
        table(JobSpec),
        "",
        "**Cluster file** (`--cluster`):",
        "",
        table(ClusterSpec),
    ])
