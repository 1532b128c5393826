"""`export_k8s`: every example exports and validates, golden output, the replica environment
as a pod ends up with it, and each gap named by its field."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from perdure.core.launchenv import LaunchSettings, build_launch
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import JobSpec, parse_job_spec
from perdure.export.k8s import K8sOptions, export_k8s, literal, master_addr, to_yaml
from perdure.export.k8s_schema import validate_export

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
EXAMPLES = sorted(ROOT.glob("examples/*/job.yaml"))
CRD = (HERE / "jobset-crd.yaml").read_text()
IMAGE = "ghcr.io/acme/train:1.0"
GOLDEN = {  # spec -> (golden file, options)
    "examples/ddp_mlp/job.yaml": ("ddp_mlp.yaml", K8sOptions(IMAGE)),
    "tests/unit/export/specs/two_pools.yaml": (
        "two_pools.yaml", K8sOptions(IMAGE, queue="team-a", namespace="ml")),
}


def load(path: Path | str) -> JobSpec:
    return parse_job_spec((ROOT / path).read_text(), str(path))


def spec_of(text: str) -> JobSpec:
    """A small spec with `text`'s top-level keys (a `pools:` in it replaces the default)."""
    pools = "" if text.startswith("pools:") else \
        "pools: [{name: w, replicas: 2, command: [python, t.py]}]\n"
    return parse_job_spec("name: x\n" + pools + "checkpoint: {dir: 's3://bucket/x'}\n" + text)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_example_exports_and_validates(path: Path) -> None:
    result = export_k8s(load(path), K8sOptions(IMAGE, queue="q"))
    assert validate_export(result.documents, CRD, "jobset-crd.yaml") == []
    jobset = result.jobset
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    assert yaml.safe_load(to_yaml([jobset])) == jobset


@pytest.mark.parametrize("spec_path", sorted(GOLDEN))
def test_golden(spec_path: str) -> None:
    """PERDURE_UPDATE_GOLDEN=1 rewrites the files; review the diff before committing it."""
    name, opts = GOLDEN[spec_path]
    result = export_k8s(load(spec_path), opts)
    validate_export(result.documents, CRD)
    text = to_yaml(result.documents)
    golden = HERE / "golden" / name
    if os.environ.get("PERDURE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


# ---- the environment a pod ends up with -------------------------------------------------

def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion of env values and commands: `$$` is a literal `$`, an
    undefined or unterminated reference stays as written."""
    out, i = [], 0
    while i < len(value):
        if value[i] == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            end = value.find(")", i + 2) if nxt == "(" else -1
            if end != -1:
                name = value[i + 2:end]
                out.append(env.get(name, value[i:end + 1]))
                i = end + 1
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(value[i])
        i += 1
    return "".join(out)


def pod_env(
    container: dict[str, Any], index: int, restarts: int
) -> tuple[dict[str, str], list[str]]:
    """The environment and argv the process of pod `index` starts with, shell script run."""
    downward = {"PERDURE_POD_INDEX": str(index), "PERDURE_JOBSET_RESTARTS": str(restarts)}
    env: dict[str, str] = {}
    for var in container["env"]:
        env[var["name"]] = downward[var["name"]] if "valueFrom" in var else expand(var["value"],
                                                                                   env)
    argv = [expand(a, env) for a in container["command"]]
    if argv[0] == "/bin/sh":  # run the rank script for real, with `env` as the command
        out = subprocess.run([*argv[:4], "env"], env=env, capture_output=True, text=True,
                             check=True).stdout
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        argv = argv[4:]
    return env, argv


def pods(spec: JobSpec, jobset: dict[str, Any]) -> list[tuple[str, str, dict[str, str], list[str]]]:
    """(pool, hostname, env, argv) of every pod, in rank order of the spec."""
    out = []
    for rj in jobset["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        container = job["template"]["spec"]["containers"][0]
        for i in range(job["completions"]):
            env, argv = pod_env(container, i, restarts=2)
            out.append((rj["name"], f"{spec.name}-{rj['name']}-0-{i}", env, argv))
    return out


# The contract's names whose values depend on where the replica runs, not on the spec.
PLACE = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
         "PERDURE_JOB_ID", "PERDURE_ATTEMPT", "PERDURE_ROUND", "PERDURE_RESTART_COUNT",
         "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"}


def test_each_pod_gets_the_local_backends_environment() -> None:
    spec = load("tests/unit/export/specs/two_pools.yaml")
    jobset = export_k8s(spec, K8sOptions(IMAGE)).jobset
    job = Job(id="trainer-abc", spec=spec, spec_dir="/", created=0.0,
              replicas=make_replicas(spec))
    settings = LaunchSettings(state_dir="/state", python="python")
    every = pods(spec, jobset)
    assert [int(env["RANK"]) for _, _, env, _ in every] == list(range(spec.total_replicas))
    for replica, (pool, _, env, argv) in zip(job.replicas, every, strict=True):
        local = build_launch(job, replica, settings)
        shared = {k: v for k, v in local.env.items() if k in env and k not in PLACE}
        assert shared == {k: env[k] for k in shared}, replica.name
        assert {"RANK", "WORLD_SIZE", "ROLE_RANK", "PERDURE_REPLICA", "HF_HOME",
                "PERDURE_CHECKPOINT_DIR", "PERDURE_CHECKPOINT_EVERY"} <= set(shared)
        if pool == "worker":
            assert env["GREETING"] == "hi $(USER)"  # the user's text, not expanded
        assert argv == list(next(p for p in spec.pools if p.name == pool).command)
        assert env["GROUP_RANK"] == env["RANK"] and env["LOCAL_RANK"] == "0"
        assert env["PERDURE_ATTEMPT"] == env["TORCHELASTIC_RESTART_COUNT"] == "2"
    primary = every[0]
    assert primary[2]["RANK"] == "0"
    assert master_addr(spec) == f"{primary[1]}.{spec.name}"  # <hostname>.<subdomain>


@given(st.text(alphabet="$()AB", max_size=12))
def test_literal_survives_kubernetes_expansion(text: str) -> None:
    assert expand(literal(text), {"A": "1", "B": "2", "AB": "3"}) == text


# ---- what maps where ---------------------------------------------------------------------

def test_pool_shape_resources_grace_and_success() -> None:
    spec = load("tests/unit/export/specs/two_pools.yaml")
    jobset = export_k8s(spec, K8sOptions(IMAGE)).jobset
    leader, worker = (rj["template"]["spec"] for rj in jobset["spec"]["replicatedJobs"])
    assert (worker["completions"], worker["parallelism"], worker["backoffLimit"]) == (3, 3, 0)
    assert worker["completionMode"] == "Indexed"
    pod = worker["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["terminationGracePeriodSeconds"] == 91
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "4", "memory": "16384Mi"}, "limits": {"memory": "16384Mi"}}
    assert pod["containers"][0]["workingDir"] == "/app"
    assert leader["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert "successPolicy" not in worker
    assert jobset["spec"]["successPolicy"] == {"operator": "Any",
                                               "targetReplicatedJobs": ["leader"]}
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True


def test_priority_class_from_the_flag_or_made_for_the_spec() -> None:
    spec = load("tests/unit/export/specs/two_pools.yaml")
    made = export_k8s(spec, K8sOptions(IMAGE))
    wpc, jobset = made.documents
    assert (wpc["kind"], wpc["value"]) == ("WorkloadPriorityClass", 100)
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == wpc["metadata"]["name"]
    given_class = export_k8s(spec, K8sOptions(IMAGE, priority_class="high"))
    assert len(given_class.documents) == 1
    assert given_class.jobset["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    plain = export_k8s(spec_of("priority: 0\n"), K8sOptions(IMAGE))
    assert "kueue.x-k8s.io/priority-class" not in plain.jobset["metadata"]["labels"]
    low = export_k8s(spec_of("priority: -5\n"), K8sOptions(IMAGE))
    assert low.documents[0]["metadata"]["name"] == "perdure-priority-minus-5"


@pytest.mark.parametrize(("text", "fields"), [
    ("", []),
    ("elastic: {mode: pause}\n", []),
    ("pools: [{name: w, replicas: 4, min_replicas: 2, command: [python]}]\n",
     ["pools.0.min_replicas"]),
    ("restart: {scope: replica}\n", ["restart.scope"]),
    ("priority: 10\n", ["priority"]),
    ("workdir: src\n", ["workdir"]),
    ("workdir: /app\n", []),
    ("scheduling: {placement_timeout_seconds: 5}\n", ["scheduling.placement_timeout_seconds"]),
    ("restart: {stop_grace_seconds: 2, round_grace_seconds: 1}\n",
     ["restart.stop_grace_seconds", "restart.round_grace_seconds"]),
    ("restart: {rules: [{exception: ValueError, action: fail}]}\n",
     ["restart.rules.0.exception"]),
])
def test_gaps_name_their_field(text: str, fields: list[str]) -> None:
    gaps = export_k8s(spec_of(text), K8sOptions(IMAGE)).gaps
    assert [g.field for g in gaps] == fields


@pytest.mark.parametrize("where", [None, "/data/ckpt", "ckpt", "file:///data/ckpt"])
def test_a_checkpoint_dir_on_the_pods_disk_is_a_gap(where: str | None) -> None:
    line = "" if where is None else f"checkpoint: {{dir: '{where}'}}\n"
    spec = parse_job_spec("name: x\npools: [{name: w, command: [python]}]\n" + line)
    gaps = export_k8s(spec, K8sOptions(IMAGE)).gaps
    assert [g.field for g in gaps] == ["checkpoint.dir"]
    assert "s3://" in gaps[0].message
