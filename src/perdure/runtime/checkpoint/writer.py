"""Write one rank's shard file in DCP's format: each item ``torch.save``d at a recorded offset.

This is what DCP's ``FileSystemWriter`` writes with ``single_file_per_rank=True``, so stock DCP
reads it; it writes from the staged buffers, whose storages hold exactly their own bytes.
Imports only torch, so that the writer process can use it without loading DCP.

Side effects: writes and fsyncs one file.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


def shard_name(rank: int) -> str:
    """The file a rank writes, named as DCP names it."""
    return f"__{rank}_0.distcp"


def write_payloads(
    path: Path, payloads: list[torch.Tensor | bytes], *, fsync: bool
) -> tuple[list[tuple[int, int]], int]:
    """Write tensors (``torch.save``d) and serialised values in order to ``path``.

    Returns each payload's (offset, length) in the file, and the file's size.
    """
    spans: list[tuple[int, int]] = []
    with open(path, "wb") as stream:
        for payload in payloads:
            start = stream.tell()
            if isinstance(payload, bytes):
                stream.write(payload)
            else:
                torch.save(payload, stream)
            spans.append((start, stream.tell() - start))
        stream.flush()
        if fsync:
            os.fsync(stream.fileno())
        size = stream.tell()
    return spans, size
