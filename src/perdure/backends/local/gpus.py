"""Find the GPUs of this host: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`, else none."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence

from perdure.backends.base import NodeInfo
from perdure.core.clusterspec import NodeSpec
from perdure.core.devices import split_host_gpus

NVIDIA_SMI_TIMEOUT = 10.0
_GPU_LINE = re.compile(r"^GPU (\d+):", re.MULTILINE)


def host_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The ids replicas may put in CUDA_VISIBLE_DEVICES: the entries of this process's own
    CUDA_VISIBLE_DEVICES when set ("" or "-1": none), else the indices `nvidia-smi -L` lists."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = []
        for entry in visible.split(","):
            entry = entry.strip()
            if not entry or entry.startswith("-"):
                break  # CUDA ignores an invalid entry and everything after it
            ids.append(entry)
        return ids
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                              timeout=NVIDIA_SMI_TIMEOUT, env=dict(env), check=False)
    except (OSError, subprocess.SubprocessError):
        return []  # no driver, no tool: no GPUs
    if done.returncode != 0:
        return []
    return _GPU_LINE.findall(done.stdout)


def local_nodes(nodes: Sequence[NodeSpec], env: Mapping[str, str] | None = None) -> list[NodeInfo]:
    """The cluster file's nodes, each with its share of this host's GPUs (the host is asked
    only when some node leaves `gpus` out or declares some)."""
    declared = [n.gpus for n in nodes]
    host = host_gpus(env) if any(g is None or g > 0 for g in declared) else []
    ids = split_host_gpus(declared, host)
    return [NodeInfo(n.name, n.slots, None, len(i), i) for n, i in zip(nodes, ids, strict=True)]
