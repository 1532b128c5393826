"""The controller's view of the Ray cluster: connecting, the GCS, the nodes, the actors.

A perdure node is the Ray node that advertises the resource `perdure_node_<name>` (its amount
is the node's slots).
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from perdure.backends.base import BackendUnavailable, NodeInfo, route_address
from perdure.backends.ray import versions
from perdure.backends.ray.actors import LaunchActor
from perdure.backends.ray.nodeactor import (
    ACTOR_CONCURRENCY,
    PIN,
    RESOURCE_PREFIX,
    remote_class,
)
from perdure.core.clusterspec import RaySpec


def connect(spec: RaySpec) -> None:
    if ray.is_initialized():
        return
    old = versions.below_floor(ray.__version__)
    if old is not None:
        raise BackendUnavailable(old)
    try:
        ray.init(address=spec.address, namespace=spec.namespace, log_to_driver=False,
                 logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as err:
        mismatch = versions.mismatch_line(str(err), spec.address) or _cluster_mismatch(spec)
        if mismatch is not None:
            raise BackendUnavailable(mismatch) from None
        raise BackendUnavailable(
            f"ray: address {spec.address!r}: cannot connect to the Ray cluster ({err}); start "
            "it with `ray start --head` or fix the cluster file's `ray: address`") from None


def _cluster_mismatch(spec: RaySpec) -> str | None:
    """The version line when the cluster's GCS says it runs another Ray or Python (an older
    client fails on a newer cluster with a ConnectionError that says nothing)."""
    try:
        raw = gcs_client(spec.address).internal_kv_get(
            b"CLUSTER_METADATA", namespace=b"cluster", timeout=5)
        meta = json.loads(raw)
        theirs = (str(meta["ray_version"]), str(meta["python_version"]))
    except Exception:
        return None
    return versions.versions_line(*theirs, ray.__version__, platform.python_version(),
                                  spec.address)


@functools.cache
def gcs_client(address: str | None = None) -> Any:
    """Ray's own client of a GCS (not public API): `address`'s, else this process's cluster's."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address or ray.get_runtime_context().gcs_address)


def own_address() -> str:
    """This machine's address on the way to the Ray cluster's GCS."""
    host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
    return route_address(host, int(port))


@dataclass(frozen=True)
class RayNode:

    name: str
    slots: int
    address: str
    node_id: str
    gpus: int = 0  # the Ray node's GPU resource
    port: int = 0  # its raylet's (0: not known)


def perdure_nodes() -> dict[str, RayNode]:
    """The perdure nodes the Ray cluster has now, by name (alive Ray nodes only)."""
    out: dict[str, RayNode] = {}
    for n in ray.nodes():  # type: ignore[no-untyped-call]
        if not n.get("Alive"):
            continue
        for key, amount in (n.get("Resources") or {}).items():
            if key.startswith(RESOURCE_PREFIX) and amount >= 1:
                name = key[len(RESOURCE_PREFIX):]
                out[name] = RayNode(name, int(amount), str(n["NodeManagerAddress"]),
                                    str(n["NodeID"]), int(n["Resources"].get("GPU", 0)),
                                    int(n.get("NodeManagerPort") or 0))
    return out


REFUSED_SECONDS = 0.5  # a host that is up refuses at once; anything slower is not an answer


def raylet_refuses(node: RayNode) -> bool:
    """Whether the node's raylet port refuses connections (its raylet is dead for sure); a
    host that does not answer is no proof."""
    if not node.port:
        return False
    try:
        with socket.create_connection((node.address, node.port), timeout=REFUSED_SECONDS):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def node_infos(configured: list[NodeInfo], live: dict[str, RayNode]) -> list[NodeInfo]:
    """The configured nodes (with their address when up), else the discovered ones."""
    if configured:  # a node's GPUs: as declared, else as its Ray node has them
        return [NodeInfo(n.name, n.slots, live[n.name].address if n.name in live else None,
                         n.gpus if n.gpus is not None else
                         live[n.name].gpus if n.name in live else 0)
                for n in configured]
    return [NodeInfo(n.name, n.slots, n.address, n.gpus) for n in sorted(live.values(),
                                                                          key=lambda n: n.name)]


def launch_actor(node: str, launch_id: str, namespace: str, record: dict[str, Any]) -> Any:
    """Create the detached actor of a launch on `node`, holding the replica's GPUs."""
    return remote_class(LaunchActor).options(**actor_options(
        node, f"launch:{launch_id}", namespace, int(record.get("gpus", 0)))).remote(record)


def spare_launch_actor(node: str, name: str, namespace: str, owner: dict[str, Any]) -> Any:
    """Start a launch actor on `node` ahead of its launch (no GPUs: a launch that needs some
    gets its own)."""
    return remote_class(LaunchActor).options(
        **actor_options(node, name, namespace, 0)).remote(None, owner)


def actor_options(node: str, name: str, namespace: str, gpus: int) -> dict[str, Any]:
    """A launch actor's options: pinned to its perdure node, taking no slot of it."""
    return {"name": name, "namespace": namespace, "lifetime": "detached",
            "resources": {RESOURCE_PREFIX + node: PIN}, "num_cpus": 0, "num_gpus": gpus,
            "max_restarts": 0, "max_concurrency": ACTOR_CONCURRENCY}


def find_launch(launch_id: str, namespace: str, name: str | None = None) -> Any | None:
    """The live actor of a launch (`name`: the spare's that took it), or None."""
    try:
        return ray.get_actor(name or f"launch:{launch_id}", namespace=namespace)
    except ValueError:
        return None


def draining_nodes() -> dict[str, int]:
    """Ray node ids being drained (a preemption or maintenance signal) -> deadline in ms
    (0: none)."""
    return {str(k): int(v) for k, v in _draining_reader()().items()}


@functools.cache
def _draining_reader() -> Callable[[], dict[Any, Any]]:
    """How this Ray reads its draining nodes (private API either way): its GCS client,
    else, on older Rays, its global state accessor."""
    gcs = gcs_client()
    if hasattr(gcs, "get_draining_nodes"):
        return functools.partial(gcs.get_draining_nodes, timeout=5)
    from ray._private.state import state

    return state.get_draining_nodes  # type: ignore[no-any-return]
