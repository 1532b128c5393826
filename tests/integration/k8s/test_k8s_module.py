"""k8s/cluster/go.mod: the test cluster's components at one Kubernetes release, every staging
module pinned to that release (a mismatch builds a mix of releases, or fails to build)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from k8scluster import REPO, _release

GO_MOD = REPO / "k8s/cluster/go.mod"


def replaces() -> dict[str, str]:
    return dict(re.findall(r"^\s*(k8s\.io/[\w.-]+) => \1 (v\S+)$", GO_MOD.read_text(), re.M))


def test_every_staging_module_is_pinned_to_the_release() -> None:
    release = _release()
    staging = f"v0.{release.removeprefix('v1.')}"
    pinned = replaces()
    assert pinned, f"{GO_MOD} replaces no k8s.io module"
    assert set(pinned.values()) == {staging}, pinned


def test_the_release_lists_no_staging_module_we_leave_unpinned() -> None:
    """Against the release's own go.mod where the build's module cache holds it (else the
    list above is all there is to check)."""
    home = Path.home() / ".cache" / "perdure-k8s"
    cache = Path(os.environ.get("PERDURE_K8S_CACHE") or home) / "gomod"
    mod = cache / "cache/download/k8s.io/kubernetes/@v" / f"{_release()}.mod"
    if not mod.exists():
        pytest.skip(f"{mod} absent: k8s/cluster/build.sh downloads it")
    theirs = set(re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", mod.read_text(), re.M))
    assert theirs and theirs == set(replaces())
