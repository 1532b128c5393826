"""Reading a spec-like YAML document into its pydantic model, and the error that names each
bad field, the fix and the value given (cut short, never a password). No side effects.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import ValidationError

from perdure.core import yamlload
from perdure.core.specbase import REFERENCE, SpecModel, did_you_mean
from perdure.secrecy import redact


class SpecError(ValueError):
    """A spec or cluster file that cannot be used; the message names the field and the fix."""


HIDDEN_VALUE = "hidden_value"  # an error whose value is never shown (it may hold a password)

MAX_ERRORS = 20  # lines of errors shown; a hostile file may have thousands


def _short(value: Any, limit: int = 80) -> str:
    """A value as it appears in an error: cut short, credentials hidden."""
    text = redact(repr(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


_PLAIN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _loc_part(part: object) -> str:
    """A field name or index as written; an odd key (empty, a newline, huge) quoted, cut."""
    text = str(part)
    return text if _PLAIN.match(text) else _short(text, 40)


def _format_errors(err: ValidationError, source: str, model: type[SpecModel]) -> str:
    lines = [f"{source}: invalid spec"]
    errors = err.errors()
    for e in errors[:MAX_ERRORS]:
        loc = ".".join(_loc_part(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = did_you_mean(model, e["loc"])
        value = e.get("input")
        hidden = ("missing", "extra_forbidden", HIDDEN_VALUE)
        shown = "" if e["type"] in hidden else f" (got {_short(value)})"
        lines.append(f"  {loc}: {msg}{shown}")
    if len(errors) > MAX_ERRORS:
        lines.append(f"  ... and {len(errors) - MAX_ERRORS} more errors")
    if any(e["type"] == "extra_forbidden" for e in errors):
        lines.append(f"  ({REFERENCE})")
    return "\n".join(lines)


def _load_yaml(text: str | bytes, source: str) -> Any:
    try:
        if isinstance(text, bytes):
            text = yamlload.decode(text)
        data = yamlload.load(text)
    except yamlload.YamlError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping of fields at the top level")
    return data


_M = TypeVar("_M", bound=SpecModel)


def parse_model(model: type[_M], text: str | bytes, source: str) -> _M:
    """Parse YAML text into `model` with the spec's bounded reader and error messages."""
    data = _load_yaml(text, source)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc, source, model)) from None
