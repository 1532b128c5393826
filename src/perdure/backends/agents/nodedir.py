"""Where a node agent keeps its launches, and its environment's names. No side effects
(a replica's Slurm step imports it).
"""

from __future__ import annotations

import os
import tempfile

# The node agent's check (the cluster file's `health: preflight`): {argv, timeout, env, cwd}
PREFLIGHT_ENV = "PERDURE_SLURM_PREFLIGHT"
SECRET_ENV = "PERDURE_SLURM_SECRET"  # the node agents' key to the hub
AGENT_ROLE = "agent"  # the handshake's launch field: an agent speaks for no launch


def node_dir(node: str) -> str:
    """This allocation's directory for perdure on this node (node-local: nothing shared)."""
    job = os.environ.get("SLURM_JOB_ID", "nojob")
    return os.path.join(tempfile.gettempdir(), "perdure-slurm", f"{job}-{node}")
