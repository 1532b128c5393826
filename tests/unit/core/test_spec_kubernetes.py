"""`kubernetes:` of a cluster file: exactly its keys, each bad value refused on a line that
names the field; only with `backend: kubernetes`; Kueue's queue and a perdure quota never
both (no double queueing)."""

from __future__ import annotations

import json

import pytest

from perdure.core.clusterspec import parse_cluster
from perdure.core.specread import SpecError


def cluster(section: object, **top: object) -> str:
    return json.dumps({"backend": "kubernetes", "kubernetes": section, **top})


def refused(text: str) -> str:
    with pytest.raises(SpecError) as err:
        parse_cluster(text, "k8s.yaml")
    return str(err.value)


def test_every_key_is_read() -> None:
    c = parse_cluster(cluster({
        "kubeconfig": "/etc/kube.conf", "context": "train", "namespace": "ml",
        "image": "registry.example/train:1", "service_account": "trainer",
        "node_selector": {"pool": "gpu", "example.com/zone": "a"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                      "limits": {"nvidia.com/gpu": 8}},
        "queue": "team-a"}))
    assert c.kubernetes is not None and c.kubernetes.queue == "team-a"
    assert c.kubernetes.resources == {"requests": {"cpu": "4", "memory": "16Gi"},
                                      "limits": {"nvidia.com/gpu": 8}}


@pytest.mark.parametrize(("section", "needle"), [
    ({}, "kubernetes.image: Field required"),
    ({"image": "x", "volumes": []}, "kubernetes.volumes"),
    ({"image": "a b"}, "kubernetes.image: an image reference has no spaces"),
    ({"image": "x", "namespace": "ML_team"}, "kubernetes.namespace: a Kubernetes name"),
    ({"image": "x", "queue": "a\n"}, "kubernetes.queue: a Kubernetes name"),
    ({"image": "x", "service_account": "-x"}, "kubernetes.service_account"),
    ({"image": "x", "node_selector": {"bad key!": "v"}}, "kubernetes.node_selector: bad key!"),
    ({"image": "x", "tolerations": [{"key": "k", "operator": "Maybe"}]},
     "kubernetes.tolerations: [0].operator: use one of"),
    ({"image": "x", "tolerations": [{"key": "k", "when": 1}]},
     "kubernetes.tolerations: [0]: unknown field(s) ['when']"),
    ({"image": "x", "resources": {"asks": {"cpu": "1"}}}, "kubernetes.resources: asks"),
    ({"image": "x", "resources": {"limits": {"cpu": "lots"}}},
     "kubernetes.resources: limits.cpu: 'lots' is not a Kubernetes quantity"),
])
def test_a_bad_field_is_named(section: dict[str, object], needle: str) -> None:
    message = refused(cluster(section))
    assert needle in message, message
    assert "Traceback" not in message


def test_the_section_needs_its_backend_and_the_backend_its_section() -> None:
    assert "kubernetes: only for `backend: kubernetes`" in refused(
        json.dumps({"backend": "local", "nodes": [{"name": "a", "slots": 1}],
                    "kubernetes": {"image": "x"}}))
    assert "needs a kubernetes section" in refused(json.dumps({"backend": "kubernetes"}))


def test_kueue_holds_the_quota_alone() -> None:
    message = refused(cluster({"image": "x", "queue": "team-a"},
                              queues=[{"name": "default", "quota": 8}]))
    assert "would queue jobs twice" in message, message
    parse_cluster(cluster({"image": "x", "queue": "team-a"}, queues=[{"name": "default"}]))
