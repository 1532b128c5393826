"""Markdown helpers of the generated pages. No side effects."""

from __future__ import annotations

import re


def no_tags(text: str) -> str:
    """`text` with `<` outside code spans escaped: `<state dir>` is no HTML tag."""
    parts = text.split("`")
    parts[::2] = [p.replace("<", "&lt;") for p in parts[::2]]
    return "`".join(parts)


def cell(text: str) -> str:
    """`text` fit for one cell of a markdown table: one line, `|` escaped, no tags."""
    return re.sub(r"(?<!\\)\|", r"\\|", no_tags(" ".join(text.split())))
