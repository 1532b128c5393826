"""`perdure export k8s` of a GPU job: nvidia.com/gpu limits, and a pod per replica that runs
procs_per_replica local ranks under torchrun (validated against the shipped k8s schemas)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from perdure.core.spec import parse_job_spec
from perdure.export.gaps import ExportError
from perdure.export.k8s import K8sOptions, export_k8s
from perdure.export.k8s_schema import check_job_templates

SPEC = """
name: llm
pools:
  - name: trainer
    replicas: 2
    gpus: 8
    procs_per_replica: 8
    command: [python, train.py]
  - name: eval
    replicas: 1
    gpus: 8
    procs_per_replica: 8
    command: [python, eval.py]
checkpoint: {dir: "s3://bucket/llm"}
"""


def containers(doc: dict) -> list[dict]:
    return [rj["template"]["spec"]["template"]["spec"]["containers"][0]
            for rj in doc["spec"]["replicatedJobs"]]


def test_gpu_limits_and_torchrun_per_pod_pass_the_k8s_schemas() -> None:
    doc = export_k8s(parse_job_spec(SPEC), K8sOptions("ghcr.io/acme/train:1.0")).jobset
    check_job_templates(doc)
    trainer, evaluator = containers(doc)
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert (env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"], env["WORLD_SIZE"]) == \
        ("8", "3", "24")
    script = trainer["command"][2]
    assert "--nproc-per-node=\"$LOCAL_WORLD_SIZE\"" in script and "--max-restarts=0" in script
    assert trainer["command"][-2:] == ["python", "train.py"]
    assert evaluator["command"][2].startswith("RANK=$$((")  # the pool's offset, then torchrun


def test_the_torchrun_script_numbers_ranks_as_torchrun_does() -> None:
    """Run the exported script with a stand-in `python` that prints torchrun's arguments."""
    doc = export_k8s(parse_job_spec(SPEC), K8sOptions("img:1")).jobset
    command = containers(doc)[1]["command"]
    script = command[2].replace("$$", "$")  # as Kubernetes passes it to the shell
    env = {"PERDURE_RANK_OFFSET": "2", "PERDURE_POD_INDEX": "0", "GROUP_WORLD_SIZE": "3",
           "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "llm-trainer-0-0.llm", "MASTER_PORT": "29500",
           "PATH": "/usr/bin:/bin"}
    shim = "python() { echo \"$@\"; }; " + script.replace("exec python", "python")
    out = subprocess.run(["/bin/sh", "-c", shim, "eval", *command[4:]], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "--node-rank=2" in out and "--nnodes=3" in out and out.rstrip().endswith(
        "--no-python python eval.py")


def test_pools_with_different_procs_cannot_be_exported() -> None:
    data = yaml.safe_load(SPEC)
    data["pools"][1]["procs_per_replica"] = 4
    with pytest.raises(ExportError, match="procs_per_replica differs"):
        export_k8s(parse_job_spec(yaml.safe_dump(data)), K8sOptions("img:1"))
