"""Which Ray the Ray backend takes, and the one line a client/cluster mismatch gets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perdure.backends.ray.versions import RAY_FLOOR, below_floor, mismatch_line, versions_line

ROOT = Path(__file__).resolve().parents[3]


def ray_error(cluster_ray: str, cluster_python: str | None = None) -> str:
    """The error the installed Ray's own check raises for a cluster of `cluster_ray`."""
    utils = pytest.importorskip("ray._private.utils")
    own_python = utils.compute_version_info()[1]
    with pytest.raises(RuntimeError) as err:
        utils.check_version_info({"ray_version": cluster_ray,
                                  "python_version": cluster_python or own_python},
                                 "node 10.0.0.1:6379", python_version_match_level="patch")
    return str(err.value)


def test_a_ray_mismatch_names_both_versions_and_what_to_install() -> None:
    import ray

    line = mismatch_line(ray_error("2.39.0"), "10.0.0.1:6379")
    assert line == (f"ray: the controller has ray {ray.__version__}, the cluster at "
                    "10.0.0.1:6379 runs ray 2.39.0; install ray==2.39.0 where perdure runs (a "
                    "Ray client must match its cluster's version)")


def test_a_python_mismatch_is_named_too() -> None:
    import ray

    line = mismatch_line(ray_error(ray.__version__, "3.9.1"), "h:1")
    assert line is not None and "Python 3.9.1" in line and "\n" not in line


def test_other_errors_are_not_taken_for_a_mismatch() -> None:
    assert mismatch_line("Failed to connect to GCS at address 10.0.0.1:6379", "x") is None


def test_the_floor_is_the_ray_extras_floor() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for extra in ("ray", "bench-ray"):
        [req] = extras[extra]
        assert re.search(r">=([\d.]+)", req)[1] == RAY_FLOOR, req  # type: ignore[index]


def test_a_ray_older_than_the_floor_is_refused_in_one_line() -> None:
    assert below_floor(RAY_FLOOR + ".0") is None and below_floor("2.60.0") is None
    line = below_floor("2.9.3")
    assert line is not None and "2.9.3" in line and f"ray>={RAY_FLOOR}" in line


def test_versions_read_from_the_cluster_make_the_same_line() -> None:
    """An older client fails on a newer cluster before Ray compares versions: the backend
    reads the cluster's from its GCS, and the line is the one Ray's own error gets."""
    assert versions_line("2.60.0", "3.11.7", "2.50.1", "3.11.7", "10.0.0.1:6379") == (
        "ray: the controller has ray 2.50.1, the cluster at 10.0.0.1:6379 runs ray 2.60.0; "
        "install ray==2.60.0 where perdure runs (a Ray client must match its cluster's "
        "version)")
    line = versions_line("2.50.1", "3.12.1", "2.50.1", "3.11.7", "h:1")
    assert line is not None and "Python 3.12.1" in line and "Python 3.11.7" in line
    assert versions_line("2.50.1", "3.11.7", "2.50.1", "3.11.7", "h:1") is None
