"""What an export cannot express: one record per spec field, shown as a warning or an error.

No side effects.
"""

from __future__ import annotations

from dataclasses import dataclass


class ExportError(ValueError):
    """An export that cannot be produced; the message names the field or flag and the fix."""


@dataclass(frozen=True)
class Gap:
    """A spec field whose behaviour the target cannot express, and what the export does instead."""

    field: str  # dotted path in the spec, as spec errors name fields: `pools.0.min_replicas`
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
