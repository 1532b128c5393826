"""Which of a host's GPUs each virtual node of the local backend holds.

No side effects: the backend finds the host's GPUs (`perdure.backends.local.gpus`) and passes
them in. Virtual nodes share one host, so their GPUs must not overlap: nodes take the host's
devices in the cluster file's order. A node that declares `gpus: N` takes the next N (ids past
the host's last device are numbered on, "virtual" GPUs for tests and dry runs); the nodes that
declare nothing share what is left, evenly, the first ones taking one more when it does not
divide.
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
    """A virtual id past the host's devices: numbered on from the last numeric id."""
    numeric = [int(x) for x in ids if x.isdigit()]
    return str(i if not numeric else max(numeric) + 1 + i - len(ids))
