"""What a launch on another host wrote, read in bounded pieces for the controller's `Mirror`."""

from __future__ import annotations

import os

from perdure import statedir

PULL_LIMIT = 1 << 20  # bytes of one stream per pull: a pull is one small message
FILES = {**statedir.STREAMS, "progress": statedir.PROGRESS}
RESTARTED = "restarted"  # in a pull: the streams read again from their start (trimmed)


def pull_launch(directory: str, offsets: dict[str, int],
                limit: int = PULL_LIMIT) -> dict[str, bytes]:
    """New bytes of a launch's logs and progress since `offsets`; a stream trimmed (logcap)
    since the last pull is read again from its start and named under RESTARTED."""
    out = {}
    restarted = []
    for stream, name in FILES.items():
        try:
            with open(os.path.join(directory, name), "rb") as f:
                offset = offsets.get(stream, 0)
                if offset > os.fstat(f.fileno()).st_size:
                    offset = 0
                    restarted.append(stream)
                f.seek(offset)
                out[stream] = f.read(limit)
        except FileNotFoundError:
            out[stream] = b""
    if restarted:
        out[RESTARTED] = ",".join(restarted).encode()
    return out
