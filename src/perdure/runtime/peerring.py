"""Which replica holds a replica's in-memory snapshot: the rule the elastic runtime's
Snapshotter follows and the simulator (`perdure sim`) calls, so that both agree.

No side effects; only the standard library (the simulator imports it without torch).
"""

from __future__ import annotations

from collections.abc import Sequence


def choose_peer(ring: Sequence[tuple[str, str]], me: str) -> str | None:
    """The replica that holds `me`'s copy, of `ring`'s (replica, node) pairs in rank order:
    the one half the ring away (neighbouring ranks share a switch), or the first after it on
    another node; else the next. None when `me` is alone or not in the ring."""
    names = [replica for replica, _ in ring]
    if me not in names or len(names) < 2:
        return None
    i = names.index(me)
    after = [*ring[i + 1:], *ring[:i]]
    half = len(ring) // 2 - 1  # after[half] is rank i + n/2
    my_node = ring[i][1]
    other = next((p for p in after[half:] + after[:half] if p[1] != my_node), None)
    return (other or after[0])[0]
