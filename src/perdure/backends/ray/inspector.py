"""The Ray backend's inspector: the controller's mirror for logs and records, the launch's
actor for signals.
"""

from __future__ import annotations

import os
from pathlib import Path

from perdure import statedir
from perdure.backends.node.inspector import LocalInspector
from perdure.core.clusterspec import ClusterSpec, RaySpec


class RayInspector(LocalInspector):
    def pool_summary(self) -> str | None:
        return None  # no warm pool on Ray nodes (yet): launches start cold

    def __init__(self, state_dir: Path | str, cluster: ClusterSpec) -> None:
        super().__init__(state_dir)
        self.spec = cluster.ray or RaySpec()

    def signal(self, launch_id: str, sig: int) -> int:
        import ray
        from ray.exceptions import RayError

        from perdure.backends.ray import cluster

        cluster.connect(self.spec)
        # a launch that took a spare launch actor has that actor's name in its record
        directory = statedir.launch_dir(self.state_dir, launch_id)
        record = statedir.read_json(os.path.join(directory, statedir.LAUNCH)) or {}
        actor = cluster.find_launch(launch_id, self.spec.namespace, record.get("actor"))
        if actor is None:
            raise ProcessLookupError(f"launch {launch_id} has no actor in Ray namespace "
                                     f"{self.spec.namespace!r}: its replica has ended")
        try:
            return int(ray.get(actor.signal.remote(sig), timeout=30))
        except RayError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, ProcessLookupError):
                raise cause from None
            if "ProcessLookupError" in str(err):
                raise ProcessLookupError(str(err).strip().splitlines()[-1]) from None
            raise ProcessLookupError(f"launch {launch_id}: its actor did not answer ({err})"
                                     ) from None
