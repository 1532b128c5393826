"""The site's navigation and links: every page under docs/ is in mkdocs.yml's nav and every
nav entry is a page (`make docs` fails on either too, strict, but needs MkDocs); README.md's
links into the site lead to pages that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parents[3]
DOCS = ROOT / "docs"


def nav_pages(entries: list[Any]) -> list[str]:
    out: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_nav_and_every_entry_is_a_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages, (
        f"not in mkdocs.yml's nav: {sorted(set(pages) - set(listed))}; "
        f"in the nav without a page: {sorted(set(listed) - set(pages))}")
    assert config["strict"] is True and config["theme"]["font"] is False


def test_the_readme_links_lead_to_pages() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 10
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing


def test_the_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme
