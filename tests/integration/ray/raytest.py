"""The Ray tests' harness: perdure's CLI against the session's Ray cluster of namespace hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from hosts import Hosts
from tests.helpers.clusterjobs import nodes_field
from tests.helpers.harness import Perdure

HERE = Path(__file__).resolve().parent


# Host a can take a whole 4-replica job when b is gone; the controller sees the slots the
# cluster file gives, which may be fewer (tests name a: 2, b: 2 to spread a job over both).
SLOTS = {"a": 4, "b": 2}


class RayPerdure(Perdure):
    """perdure's CLI against the Ray cluster of `hosts`, in a namespace of its own per test."""

    hosts: Hosts
    namespace: str
    cluster_file: Path | None = None

    def cluster(self, nodes: dict[str, int], quota: int | None = None) -> Path:
        """The local tests' cluster files, on Ray (same nodes, slots at most the hosts')."""
        path = self.ray_cluster(nodes)
        if quota is not None:
            data = yaml.safe_load(path.read_text())
            data["queues"] = [{"name": "default", "quota": quota}]
            path.write_text(yaml.safe_dump(data))
        return path

    def ray_cluster(self, nodes: dict[str, int] | None = None, **ray: Any) -> Path:
        """ray.yaml for this test's namespace (nodes discovered from Ray when None)."""
        data: dict[str, Any] = {
            "backend": "ray",
            "ray": {"address": self.hosts.head_address, "namespace": self.namespace,
                    "shared_dirs": [str(self.root)], **ray},
            "queues": [{"name": "default"}],
        }
        if nodes is not None:
            data["nodes"] = nodes_field(nodes)
        self.cluster_file = self.write("ray.yaml", data)
        return self.cluster_file

    def cli(self, *args: str, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base(), *self._on_ray(args)], capture_output=True,
                              text=True, timeout=timeout, check=check, env=self.hosts.env())

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*self.base(), *self._on_ray(args)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.hosts.env())

    def _on_ray(self, args: tuple[str, ...]) -> list[str]:
        """`run`, `submit` and `controller` without --cluster get this test's Ray cluster."""
        if args and args[0] in ("run", "submit", "controller") and "--cluster" not in args:
            return [*args, "--cluster", str(self.cluster_file or self.ray_cluster())]
        return list(args)

    def base(self) -> list[str]:
        return [sys.executable, "-m", "perdure.cli.main", "--state-dir", str(self.state)]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


LIST_ACTORS = ("import json, ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
               "print(json.dumps([a['name'] for a in ray.util.list_named_actors(True) "
               "if a['namespace'] == sys.argv[2]]))")


KILL_ACTORS = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
               "[ray.kill(ray.get_actor(a['name'], namespace=sys.argv[2])) "
               "for a in ray.util.list_named_actors(True) if a['namespace'] == sys.argv[2]]")


def kill_actors(p: RayPerdure) -> None:
    """A test leaves no replica behind: kill its namespace's actors (their replicas die too)."""
    subprocess.run([sys.executable, "-c", KILL_ACTORS, p.hosts.head_address, p.namespace],
                   capture_output=True, timeout=60, env=p.hosts.env(), check=False)


def named_actors(p: RayPerdure) -> list[str]:
    """The live named actors of the test's namespace (launches not yet released, agents)."""
    r = subprocess.run([sys.executable, "-c", LIST_ACTORS, p.hosts.head_address, p.namespace],
                       capture_output=True, text=True, timeout=60, env=p.hosts.env(), check=True)
    names: list[str] = json.loads(r.stdout.strip().splitlines()[-1])
    return names
