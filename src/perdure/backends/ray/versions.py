"""Which Ray the Ray backend works with, and the one line a version mismatch gets (pure: no
ray import, no side effects).

`RAY_FLOOR` is the oldest Ray the backend is tested on (the ray extra's floor in
pyproject.toml; a unit test holds the two equal; scripts/compat_matrix.py's ray cells run every
Ray test on it and on the newest). What differs across that range, and where the backend
meets it: draining nodes are read through the GCS client where it has the call (2.60), else
through Ray's global state accessor (2.50) (`cluster._draining_reader`, found once per
process); the namespace lock is a detached actor on every version, as 2.50's GCS cancels a
driver-owned actor whose driver it cannot call back (`nslock`).

Ray's client and cluster must run the same Ray (and Python): `ray.init` refuses another with a
multi-line "Version mismatch" error, which
`mismatch_line` turns into one line that says what to install.
"""

from __future__ import annotations

import re

__all__ = ["RAY_FLOOR", "below_floor", "mismatch_line"]

RAY_FLOOR = "2.50"

_MISMATCH = re.compile(
    r"cluster was started with:\s*Ray: (?P<cluster_ray>\S+)\s*Python: (?P<cluster_py>\S+)"
    r".*?was started with:\s*Ray: (?P<own_ray>\S+)\s*Python: (?P<own_py>\S+)", re.S)


def mismatch_line(message: str, address: str) -> str | None:
    """One line for Ray's version-mismatch error `message` (None for any other message)."""
    m = _MISMATCH.search(message)
    if m is None:
        return None
    cluster, own = m["cluster_ray"], m["own_ray"]
    if cluster != own:
        return (f"ray: the controller has ray {own}, the cluster at {address} runs ray "
                f"{cluster}; install ray=={cluster} where perdure runs (a Ray client must "
                "match its cluster's version)")
    return (f"ray: the controller runs Python {m['own_py']}, the cluster at {address} runs "
            f"Python {m['cluster_py']}; run perdure with Python {m['cluster_py']} (Ray needs "
            "the same Python on both sides)")


def below_floor(version: str) -> str | None:
    """One line when the installed Ray `version` is older than RAY_FLOOR, else None."""
    if _numbers(version) >= _numbers(RAY_FLOOR):
        return None
    return (f"ray: perdure's Ray backend supports ray>={RAY_FLOOR},<3; this environment has "
            f"ray {version}: pip install 'ray>={RAY_FLOOR},<3' (the cluster must run the same)")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])
