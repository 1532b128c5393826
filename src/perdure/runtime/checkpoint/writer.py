"""Write one rank's shard file in DCP's format: each item ``torch.save``d at a recorded offset.

This is what DCP's ``FileSystemWriter`` writes with ``single_file_per_rank=True``, so stock DCP
reads it; it writes from the staged buffers, whose storages hold exactly their own bytes.
Tensors are saved without the zip CRC-32 (torch's own ``compute_crc32=False`` format, which
``torch.load`` reads; it never checks the CRC): computing it costs ~0.3 s of CPU per GiB, taken
from training. Imports only torch, so that the writer process can use it without loading DCP.

Side effects: writes and fsyncs one file.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import IO

import torch


def shard_name(rank: int) -> str:
    """The file a rank writes, named as DCP names it."""
    return f"__{rank}_0.distcp"


def save_tensor(tensor: torch.Tensor, stream: IO[bytes]) -> None:
    """``torch.save(tensor, stream)`` without the CRC-32, and without changing torch's global
    setting for it (the training thread may be saving too). Falls back to plain torch.save if
    torch's internals differ from what this expects."""
    try:
        writer = torch._C.PyTorchFileWriter(
            stream, False, torch.serialization._get_storage_alignment()
        )
        save: Callable[..., None] = torch.serialization._save
    except (AttributeError, TypeError):
        torch.save(tensor, stream)
        return
    save(tensor, writer, pickle, torch.serialization.DEFAULT_PROTOCOL, False)
    writer.write_end_of_file()


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
                save_tensor(payload, stream)
            spans.append((start, stream.tell() - start))
        stream.flush()
        if fsync:
            os.fsync(stream.fileno())
        size = stream.tell()
    return spans, size
