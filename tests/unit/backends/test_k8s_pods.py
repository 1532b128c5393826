"""An attempt's agent pod as the Kubernetes backend makes it: on its node, found again by its
labels, Kueue's queue label when asked, credentials only from Secrets; and what a pod's or a
node's status means to perdure."""

from __future__ import annotations

from typing import Any

from perdure.backends.kubernetes import pods as pd
from perdure.backends.kubernetes.backend import credential_names, host_dirs
from perdure.core.k8sspec import KubernetesSpec


def plan(**kw: Any) -> pd.PodPlan:
    base: dict[str, Any] = dict(name="perdure-j-1-abc", tag="t1", job_id="j-1f2e", attempt="1",
                                node="node-7", command=["python", "-m", "agent"], cpus=2,
                                gpus=0, grace=30, job_name="j")
    return pd.PodPlan(**{**base, **kw})


def test_the_pod_holds_its_node_and_says_whose_it_is() -> None:
    spec = KubernetesSpec(image="img:1", node_selector={"pool": "gpu"},
                          tolerations=[{"key": "k", "operator": "Exists"}])
    m = pd.manifest(spec, plan(gpus=4))
    assert m["metadata"]["labels"] == {pd.STATE_LABEL: "t1", pd.JOB_LABEL: "j-1f2e",
                                       pd.ATTEMPT_LABEL: "1"}
    assert m["metadata"]["annotations"][pd.NODE_ANNOTATION] == "node-7"
    s = m["spec"]
    assert s["nodeSelector"] == {"pool": "gpu", pd.HOSTNAME_LABEL: "node-7"}
    assert s["restartPolicy"] == "Never" and s["hostNetwork"] and s["shareProcessNamespace"]
    assert s["terminationGracePeriodSeconds"] == 30 + pd.GRACE_MARGIN
    assert s["tolerations"] == [{"key": "k", "operator": "Exists"}]
    (c,) = s["containers"]
    assert c["resources"] == {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "4"}}
    assert not s["automountServiceAccountToken"] and "serviceAccountName" not in s


def test_kueue_label_service_account_and_resources_from_the_cluster_file() -> None:
    spec = KubernetesSpec(image="img:1", queue="team-a", service_account="trainer",
                          resources={"limits": {"nvidia.com/gpu": 8}})
    m = pd.manifest(spec, plan())
    assert m["metadata"]["labels"][pd.KUEUE_LABEL] == "team-a"
    assert m["spec"]["serviceAccountName"] == "trainer"
    assert m["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}


def test_credentials_come_from_secrets_never_the_manifest() -> None:
    env = {"HF_TOKEN": "hf_abcdefgh", "DATA": "s3://me:pw@host/b", "PLAIN": "1",
           "PERDURE_JOB_SECRET": "xyz"}
    names = credential_names(env)
    assert names == ["DATA", "HF_TOKEN"]
    m = pd.manifest(KubernetesSpec(image="i"), plan(credentials=tuple(names)))
    text = repr(m)
    assert "hf_abcdefgh" not in text and "pw@" not in text and "xyz" not in text
    env_of = {e["name"]: e for e in m["spec"]["containers"][0]["env"]}
    assert env_of["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "j-credentials",
                                                               "key": "HF_TOKEN"}
    assert env_of["PERDURE_SLURM_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == \
        pd.agent_secret_name("t1")


def test_host_dirs_mount_read_only_when_marked() -> None:
    assert host_dirs(["/usr", "ro", "/data", "", "/venv", "ro"]) == (
        "/usr:ro", "/data", "/venv:ro")
    m = pd.manifest(KubernetesSpec(image="i"), plan(host_dirs=("/usr:ro", "/data")))
    mounts = m["spec"]["containers"][0]["volumeMounts"]
    assert [(x["mountPath"], x["readOnly"]) for x in mounts] == [("/usr", True),
                                                                  ("/data", False)]


def pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {}, "status": status}


def test_what_a_status_says() -> None:
    gone = {"metadata": {"name": "p", "deletionTimestamp": "t",
                         "deletionGracePeriodSeconds": 45}}
    assert pd.terminating(gone) and pd.graceful(gone)
    forced = {"metadata": {**gone["metadata"], "deletionGracePeriodSeconds": 0}}
    assert pd.terminating(forced) and not pd.graceful(forced)
    waiting = pod(phase="Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                                "reason": "Unschedulable",
                                                "message": "0/3 nodes are available"}])
    assert pd.waiting_reason(waiting) == "Unschedulable: 0/3 nodes are available"
    broken = pod(phase="Pending", containerStatuses=[{"state": {"waiting": {
        "reason": "CreateContainerConfigError", "message": 'secret "j-credentials" not found'}}}])
    assert pd.config_error(broken) == ('CreateContainerConfigError: secret "j-credentials" '
                                       "not found")
    gated = {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "kueue"}]},
             "status": {"phase": "Pending"}}
    assert pd.waiting_reason(gated).startswith("SchedulingGated")
    node = {"spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    assert not pd.node_ready(node) and pd.unschedulable(node)
    assert [pd.quantity(q) for q in ("2", "1500m", "4k")] == [2, 1, 4000]


def test_a_replicas_gpus_are_named_as_its_pod_sees_them() -> None:
    seen: dict[str, int] = {}
    assert pd.pod_gpus("4,5", seen) == "0,1"
    assert pd.pod_gpus("6", seen) == "2"
    assert pd.pod_gpus("5,4", seen) == "1,0"  # a restart in place: the same devices
