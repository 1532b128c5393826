"""The base every spec and cluster-file model inherits: unknown fields refused, every value
bounded (finite, in range, no NUL byte, valid Unicode), whatever the model.

No side effects. Apart from spec.py so that every spec module inherits it without a cycle.
"""

from __future__ import annotations

import difflib
import math
import re
import typing
from collections.abc import Sequence
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

# Bounds no real job comes near; they keep one job's cost to the controller bounded (a tick,
# the stored row) and every number within what sqlite and JSON hold exactly.
INT_LIMIT = 2**31 - 1
FLOAT_LIMIT = 1e9  # seconds: 31 years
MAX_STRING = 32 * 1024  # characters in one value; exec refuses an argument over 128 KiB
MAX_NODES = 16384
MAX_GPUS = 1024  # per replica or node: more than any machine has

# a job's, pool's or node's name; with .match (\Z: no trailing newline)
NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")


class SpecModel(BaseModel):
    """Every spec model: unknown fields refused, every value checked by `check_value`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, v: Any) -> Any:
        check_value(v)
        return v


def check_value(v: Any) -> None:
    """Raise ValueError for a value no field may hold; recurse into lists and dicts."""
    if isinstance(v, bool) or v is None or isinstance(v, BaseModel | Enum):
        return
    if isinstance(v, int) and abs(v) > INT_LIMIT:
        raise ValueError(f"must be between {-INT_LIMIT} and {INT_LIMIT}")
    if isinstance(v, float) and (not math.isfinite(v) or abs(v) > FLOAT_LIMIT):
        raise ValueError(f"must be a finite number between {-FLOAT_LIMIT:g} and {FLOAT_LIMIT:g}")
    if isinstance(v, str):
        if len(v) > MAX_STRING:
            raise ValueError(f"{len(v)} characters is more than the {MAX_STRING} a value may "
                             "have (the kernel refuses longer arguments and variables)")
        if "\0" in v:
            raise ValueError("contains a NUL byte, which no argument, path or name may hold")
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("is not valid Unicode (a lone surrogate)") from None
    elif isinstance(v, list | tuple):
        for x in v:
            check_value(x)
    elif isinstance(v, dict):
        for k, x in v.items():
            check_value(k)
            check_value(x)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The spec model inside `annotation` (`list[PoolSpec] | None` -> PoolSpec), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def fields_at(model: type[BaseModel], loc: Sequence[object]) -> list[str]:
    """The field names of the model at `loc` (a pydantic error's location) under `model`."""
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(str(part))
        inner = model_in(info.annotation) if info is not None else None
        if inner is None:
            return []
        model = inner
    return list(model.model_fields)


def did_you_mean(model: type[BaseModel], loc: Sequence[object]) -> str:
    """The message for an unknown field at `loc`: the closest known name."""
    known = fields_at(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"unknown field; did you mean `{close[0]}`?"
    return f"unknown field; the fields here are {', '.join(known)}" if known else \
        "unknown field"


REFERENCE = ("every field, its type and default: the spec reference, docs/reference/spec.md "
             "(`make docs` builds the site)")
