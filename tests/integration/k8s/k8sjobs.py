"""examples/ddp_mlp as `perdure export k8s` writes it, made runnable on the test cluster.

`export_jobset` runs the real CLI. `for_test_cluster` changes only what the test cluster
lacks, and nothing of what the export decided (names, env, policies, the Jobs' shape):
- no registry and no CNI: the local tools image (`imagePullPolicy: Never`), `hostNetwork`,
  and this machine's interpreter, venv and sources mounted read-only at their own paths (as in
  test_k8s_cluster.py);
- no shared storage class: the job's directory (checkpoints, timeline, result.json) is a
  read-write hostPath at its own path: every host sees the same disk, as a shared volume;
- `hostPID`: a rank's process id is the machine's (the timeline tells processes apart by it,
  and the tests SIGKILL a rank by it).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import yaml
from k8scluster import REPO
from k8simages import TOOLS_IMAGE

EXAMPLE = REPO / "examples" / "ddp_mlp"
PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def ddp_spec(root: Path, name: str, epochs: int, replicas: int = 4, step_time: float = 0.0,
             every: int = 10, extra_args: tuple[str, ...] = (),
             restart: dict[str, int] | None = None) -> Path:
    """examples/ddp_mlp/job.yaml as `name`: this interpreter and the example's absolute path,
    checkpoints under `root` (which every host sees), one thread a rank."""
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["name"] = name
    pool = spec["pools"][0]
    pool["replicas"] = replicas
    pool["command"] = [sys.executable, str(EXAMPLE / "train.py"), "--epochs", str(epochs),
                       "--step-time", str(step_time), "--log-every", "5", *extra_args]
    spec["checkpoint"] = {"every_steps": every, "dir": str(root / "ckpt")}
    spec["env"] = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0",
                   "PYTHONPATH": str(REPO / "src")}
    if restart:
        spec["restart"] = restart
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def export_jobset(spec: Path, crd: Path | None = None) -> tuple[dict[str, Any], str]:
    """`perdure export k8s SPEC --image <the tools image>` (checked against the CRD file
    `crd` too when given): the JobSet and the CLI's stderr."""
    check = ["--crd", str(crd)] if crd is not None else []
    r = subprocess.run([*PERDURE, "export", "k8s", str(spec), "--image", TOOLS_IMAGE,
                        "--namespace", "default", *check], capture_output=True, text=True,
                       timeout=120,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    if r.returncode != 0:
        raise RuntimeError(f"perdure export k8s failed: {r.stderr.strip()}")
    docs = list(yaml.safe_load_all(r.stdout))
    jobset: dict[str, Any] = docs[-1]
    return jobset, r.stderr


def for_test_cluster(jobset: dict[str, Any], shared: Path) -> dict[str, Any]:
    """The exported JobSet with the test cluster's adaptations (module doc), as a copy."""
    out: dict[str, Any] = json.loads(json.dumps(jobset))
    venv = Path(sys.prefix)
    base = Path(os.path.realpath(sys.executable)).parents[1]
    read_only = sorted({"/usr", "/lib", "/lib64", str(base), str(venv.resolve()), str(REPO)})
    vols = [{"name": f"h{i}", "hostPath": {"path": p, "type": "Directory"}}
            for i, p in enumerate(read_only)]
    mounts = [{"name": f"h{i}", "mountPath": p, "readOnly": True}
              for i, p in enumerate(read_only)]
    vols.append({"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}})
    mounts.append({"name": "shared", "mountPath": str(shared)})
    for rj in out["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]["spec"]
        pod.update(hostNetwork=True, hostPID=True, automountServiceAccountToken=False,
                   volumes=vols)
        for c in pod["containers"]:
            c.update(imagePullPolicy="Never", volumeMounts=mounts)
    return out


def rank_pid(job: str, rank: int, attempt: int | None = None) -> int | None:
    """The live training process of `job`'s rank `rank`, found by its environment; with
    `attempt`, only one of that JobSet restart attempt (not an old pod's, still stopping)."""
    for proc in psutil.process_iter(["environ", "status"]):
        with contextlib.suppress(psutil.Error):
            env = proc.info["environ"] or {}
            if env.get("PERDURE_JOB_ID") == job and env.get("RANK") == str(rank) \
                    and proc.info["status"] != "zombie" and "python" in proc.name() \
                    and attempt in (None, int(env.get("PERDURE_JOBSET_RESTARTS", -1))):
                return int(proc.pid)
    return None
