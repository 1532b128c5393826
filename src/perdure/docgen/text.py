"""Markdown helpers of the generated pages. No side effects."""

from __future__ import annotations

import re


def cell(text: str) -> str:
    """`text` fit for one cell of a markdown table: one line, `|` escaped, and `<` outside
    code spans escaped (`<state dir>` is no HTML tag)."""
    text = " ".join(text.split())
    parts = text.split("`")
    parts[::2] = [p.replace("<", "&lt;") for p in parts[::2]]
    return re.sub(r"(?<!\\)\|", r"\\|", "`".join(parts))
