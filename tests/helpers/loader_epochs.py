"""Read an ElasticLoader epoch by epoch, as a training loop does (tests' shared helper)."""

from __future__ import annotations

from typing import Any


def epochs_of(loader: Any, epochs: range, stop: int | None = None) -> list[Any]:
    """The batches of `epochs`; stops (without finishing the epoch) after `stop` batches."""
    got: list[Any] = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        for batch in loader:
            got.append(batch)
            if stop is not None and len(got) == stop:
                return got
    return got
