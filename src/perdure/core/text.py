"""Words for what perdure prints: counts with their noun in the right number, lists cut short."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 slot`, `2 slots` (`nouns`: the plural when it is not noun + "s")."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def all_of(count: int, noun: str) -> str:
    """`the replica` for one, `all 2 replicas` for more."""
    return f"the {noun}" if count == 1 else f"all {count} {noun}s"


def some_of(items: list[str], limit: int = 16) -> str:
    """`a, b, c`; cut after `limit` items: `a, b, ... and 16,382 more`."""
    if len(items) <= limit:
        return ", ".join(items)
    return f"{', '.join(items[:limit])}, ... and {len(items) - limit:,} more"

