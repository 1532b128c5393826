"""The documentation's generated pages: reference and concepts written from the code.

Each page under docs/ that holds generated text has it between two markers,
`<!-- generated: NAME ... -->` and `<!-- generated: end -->`; the prose around them is
hand-written. `python -m perdure.docgen` (`make docs-reference`) rewrites every block;
`--check` exits 1 naming the stale pages, and tests/unit/docs fails on a stale one. No side
effects but the page files.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

START = "<!-- generated: {name} (by `make docs-reference`; do not edit) -->"
END = "<!-- generated: end -->"


@dataclass(frozen=True)
class Page:
    """A page of docs/ and how its generated block is made."""

    path: str  # relative to the repository root
    name: str  # the block's name in its start marker
    render: Callable[[], str]


def splice(text: str, name: str, body: str, where: str = "the page") -> str:
    """`text` with the block `name` replaced by `body` (markers kept)."""
    start_marker = START.format(name=name)
    pattern = re.compile(re.escape(start_marker) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{where} has no generated block `{name}`: add the lines "
                         f"{start_marker} and {END}")
    return pattern.sub(lambda m: f"{start_marker}\n{body.rstrip()}\n{END}", text, count=1)


def pages() -> list[Page]:
    """Every generated page (imports are inside: each generator imports what it documents)."""
    from perdure.docgen import cliref, coreref, httpref, pyref, specref

    return [
        Page("docs/reference/spec.md", "spec", specref.reference),
        Page("docs/reference/cli.md", "cli", cliref.render),
        Page("docs/reference/python-api.md", "python-api", pyref.render),
        Page("docs/reference/http-api.md", "http-api", httpref.render),
        Page("docs/reference/errors.md", "error-codes", coreref.errors),
        Page("docs/concepts/lifecycle.md", "lifecycle", coreref.lifecycle),
        Page("docs/concepts/failure-policy.md", "failure-policy", coreref.failure_policy),
    ]


def updated(page: Page, root: Path) -> tuple[str, str]:
    """(the page's text now, the text it should have)."""
    text = (root / page.path).read_text()
    return text, splice(text, page.name, page.render(), page.path)
