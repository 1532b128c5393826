"""`backend: kubernetes` before anything starts: a kubeconfig that cannot be read, a context
it lacks, an API server that does not answer: each one line naming what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perdure.backends.base import BackendUnavailable
from perdure.backends.factory import make_backend
from perdure.backends.kubernetes.api import KubeError
from perdure.core.clusterspec import parse_cluster


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u",
                                                  "namespace": "ml"}}]}))
    return path


def backend(tmp_path: Path, **section: object) -> object:
    cluster = parse_cluster(yaml.safe_dump({"backend": "kubernetes",
                                            "kubernetes": {"image": "i", **section}}))
    return make_backend(cluster, tmp_path / "state")


def test_an_unreadable_kubeconfig_is_named(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match=r"kubernetes.kubeconfig: cannot read .*/nowhere"):
        backend(tmp_path, kubeconfig=str(tmp_path / "nowhere"))


def test_a_missing_context_is_named(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kc", "https://127.0.0.1:1")
    with pytest.raises(KubeError, match=r"no context 'there' \(it has \['here'\]\); set "
                                        r"kubernetes.context"):
        backend(tmp_path, kubeconfig=str(path), context="there")


def test_a_server_that_does_not_answer_stops_the_start(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kc", "https://127.0.0.1:1")
    with pytest.raises(BackendUnavailable) as err:
        backend(tmp_path, kubeconfig=str(path))
    message = str(err.value)
    assert message.startswith("kubernetes: GET /api/v1/namespaces/ml/pods: the API server at "
                              "https://127.0.0.1:1 did not answer"), message
    assert "\n" not in message
