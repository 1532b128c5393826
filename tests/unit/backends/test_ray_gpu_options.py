"""The Ray launch actor holds the replica's GPUs (num_gpus), so Ray picks them and sets the
actor's CUDA_VISIBLE_DEVICES, which the replica inherits."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from perdure.backends.base import NodeInfo
from perdure.backends.ray import cluster as rc


def test_launch_actor_options_ask_ray_for_the_replicas_gpus() -> None:
    options = rc.actor_options("a", "launch:job.1.worker-0.1", "perdure", 4)
    assert options["num_gpus"] == 4 and options["num_cpus"] == 0
    assert options["resources"] == {rc.RESOURCE_PREFIX + "a": rc.PIN}
    assert rc.actor_options("a", "launch:x", "perdure", 0)["num_gpus"] == 0


def test_node_gpus_come_from_the_cluster_file_else_from_ray() -> None:
    live = {"a": rc.RayNode("a", 8, "10.0.0.2", "id-a", gpus=8),
            "b": rc.RayNode("b", 8, "10.0.0.3", "id-b", gpus=8)}
    configured = [NodeInfo("a", 8, gpus=None), NodeInfo("b", 8, gpus=2)]
    assert [n.gpus for n in rc.node_infos(configured, live)] == [8, 2]
    assert [n.gpus for n in rc.node_infos([], live)] == [8, 8]
