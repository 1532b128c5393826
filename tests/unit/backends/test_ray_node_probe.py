"""A dead raylet is known in a round trip when its host refuses the port (the Ray call that
probes a node's agent waits out its timeout instead)."""

from __future__ import annotations

import socket
import time

from perdure.backends.ray.cluster import RayNode, raylet_refuses


def test_a_raylet_port_that_refuses_is_a_dead_raylet() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    node = RayNode("b", 2, "127.0.0.1", "id-b", port=server.getsockname()[1])
    assert not raylet_refuses(node)  # a raylet that listens is alive, however busy
    server.close()
    began = time.monotonic()
    assert raylet_refuses(node)
    assert time.monotonic() - began < 0.5
    assert not raylet_refuses(RayNode("b", 2, "127.0.0.1", "id-b"))  # port unknown: no proof
