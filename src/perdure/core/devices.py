"""Which of a host's GPUs each virtual node of the local backend holds.

No side effects. Nodes take the host's devices in the cluster file's order, never overlapping:
`gpus: N` takes the next N (past the host's last, "virtual" GPUs for tests and dry runs); the
nodes that declare nothing share what is left evenly.
"""

from __future__ import annotations

from collections.abc import Sequence


def split_host_gpus(declared: Sequence[int | None], host: Sequence[str]) -> list[tuple[str, ...]]:
    """The device ids (CUDA_VISIBLE_DEVICES names) of each node, in the order of `declared`."""
    out: list[tuple[str, ...]] = [() for _ in declared]
    ids = list(host)
    nxt = 0

    def take(n: int) -> tuple[str, ...]:
        nonlocal nxt
        got = [ids[i] if i < len(ids) else _after(ids, i) for i in range(nxt, nxt + n)]
        nxt += n
        return tuple(got)

    for i, n in enumerate(declared):
        if n is not None:
            out[i] = take(n)
    rest = max(0, len(ids) - nxt)
    undeclared = [i for i, n in enumerate(declared) if n is None]
    for k, i in enumerate(undeclared):
        share = rest // len(undeclared) + (1 if k < rest % len(undeclared) else 0)
        out[i] = take(share)
    return out


def _after(ids: list[str], i: int) -> str:
    numeric = [int(x) for x in ids if x.isdigit()]
    return str(i if not numeric else max(numeric) + 1 + i - len(ids))
