"""Which Ray the Ray backend works with (`RAY_FLOOR`: the ray extra's floor), and the one line
a version mismatch gets. No side effects.
"""

from __future__ import annotations

import re

RAY_FLOOR = "2.60"

_MISMATCH = re.compile(
    r"cluster was started with:\s*Ray: (?P<cluster_ray>\S+)\s*Python: (?P<cluster_py>\S+)"
    r".*?was started with:\s*Ray: (?P<own_ray>\S+)\s*Python: (?P<own_py>\S+)", re.S)


def mismatch_line(message: str, address: str) -> str | None:
    """One line for Ray's version-mismatch error `message` (None for any other message)."""
    m = _MISMATCH.search(message)
    if m is None:
        return None
    return versions_line(m["cluster_ray"], m["cluster_py"], m["own_ray"], m["own_py"], address)


def versions_line(cluster_ray: str, cluster_py: str, own_ray: str, own_py: str,
                  address: str) -> str | None:
    """One line when the cluster's Ray or Python differs from the controller's, else None."""
    if cluster_ray != own_ray:
        return (f"ray: the controller has ray {own_ray}, the cluster at {address} runs ray "
                f"{cluster_ray}; install ray=={cluster_ray} where perdure runs (a Ray client "
                "must match its cluster's version)")
    if cluster_py != own_py:
        return (f"ray: the controller runs Python {own_py}, the cluster at {address} runs "
                f"Python {cluster_py}; run perdure with Python {cluster_py} (Ray needs the "
                "same Python on both sides)")
    return None


def below_floor(version: str) -> str | None:
    """One line when the installed Ray `version` is older than RAY_FLOOR, else None."""
    if _numbers(version) >= _numbers(RAY_FLOOR):
        return None
    return (f"ray: perdure's Ray backend supports ray>={RAY_FLOOR},<3; this environment has "
            f"ray {version}: pip install 'ray>={RAY_FLOOR},<3' (the cluster must run the same)")


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])
