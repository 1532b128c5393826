"""Hosts for a real multi-node Ray cluster on one machine: a network namespace per host.

Ray replaces `--node-ip-address=127.0.0.1` with the machine's external address, where no
traffic may go here, so each Ray node (the head, nodes a and b) runs in a network namespace of
its own with an address in a private /24 on a bridge; the controller stays in the root
namespace and reaches the head over the bridge. A host dies when every process in its
namespace is SIGKILLed. Names carry a random suffix so that parallel runs cannot collide.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 6379
NETNS_ETC = Path("/etc/netns")
OBJECT_STORE_BYTES = 100 * 2**20  # perdure moves no data through Ray's object store
# Every host's interface has this name inside its namespace, as on a uniform cluster: a program
# that must be told its interface (gloo in Ray Train: GLOO_SOCKET_IFNAME) gets one setting.
IFNAME = "eth0"


class HostsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no `ip`, no ray): the reason, for a skip."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _pick_subnet() -> ipaddress.IPv4Network:
    """A random 10.x.y.0/24 that no route of this machine touches yet."""
    routes = _ip("-4", "route", "show", "table", "all").stdout
    used = [ipaddress.ip_network(w, strict=False) for line in routes.splitlines()
            for w in line.split()[:1] if "/" in w or w[:1].isdigit()]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randint(64, 250)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise HostsUnavailable("no free private /24 found for the test hosts")


@dataclass
class Host:
    name: str  # head, a, b
    netns: str
    address: str
    resources: dict[str, float]
    cpus: int
    temp_root: Path
    starts: int = 0

    @property
    def temp_dir(self) -> Path:
        return self.temp_root / f"{self.name}{self.starts}"

    def pids(self) -> list[int]:
        out = _ip("netns", "pids", self.netns, check=False).stdout
        return [int(p) for p in out.split()]


@dataclass
class Hosts:
    """A Ray head and worker hosts, each in its own network namespace on one bridge."""

    suffix: str
    subnet: ipaddress.IPv4Network
    bridge: str
    temp_root: Path
    hosts: dict[str, Host] = field(default_factory=dict)
    veths: list[str] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return str(self.subnet[1])

    @property
    def head_address(self) -> str:
        return f"{self.hosts['head'].address}:{HEAD_PORT}"

    def env(self) -> dict[str, str]:
        """The environment for Ray commands and drivers of this cluster."""
        env = dict(os.environ)
        env.pop("RAY_ADDRESS", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["RAY_DEDUP_LOGS"] = "0"
        return env

    # ---- make and remove ------------------------------------------------------------------

    def add_host(self, name: str, index: int, resources: dict[str, float], cpus: int) -> Host:
        netns = f"prd{self.suffix}{name}"
        outer, inner = f"pv{self.suffix}{index}", f"pv{self.suffix}{index}i"
        _ip("netns", "add", netns)
        host = Host(name, netns, str(self.subnet[10 + index]), resources, cpus, self.temp_root)
        self.hosts[name] = host
        # `ip netns exec` mounts these over /etc: no name server is reachable from a host, so
        # give it none (a reverse lookup fails at once instead of timing out for seconds).
        etc = NETNS_ETC / netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text("options timeout:1 attempts:1\n")
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{host.address} {netns}\n")
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        self.veths.append(outer)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("link", "set", inner, "netns", netns)
        inside = ["netns", "exec", netns, "ip"]
        _ip(*inside, "link", "set", inner, "name", IFNAME)
        _ip(*inside, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", IFNAME)
        _ip(*inside, "link", "set", IFNAME, "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "route", "add", "default", "via", self.gateway)
        return host

    def start(self, *names: str, timeout: float = 90, env: dict[str, str] | None = None) -> None:
        """`ray start` on hosts, at once (again after a kill: a new Ray node, same resources);
        `env` adds to the Ray processes' environment (Ray's own settings, say)."""
        procs = {name: subprocess.Popen(self._start_command(name), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        env={**self.env(), **(env or {})})
                 for name in names}
        failed = []
        for name, proc in procs.items():
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            if proc.returncode != 0:
                failed.append(f"ray start on {name} failed ({proc.returncode}): {out[-2000:]}")
        if failed:
            raise RuntimeError("\n".join(failed))

    def _start_command(self, name: str) -> list[str]:
        host = self.hosts[name]
        host.starts += 1
        host.temp_dir.mkdir(parents=True, exist_ok=True)
        cmd = ["ip", "netns", "exec", host.netns, RAY, "start",
               f"--node-ip-address={host.address}", f"--temp-dir={host.temp_dir}",
               "--disable-usage-stats", f"--num-cpus={host.cpus}",
               f"--object-store-memory={OBJECT_STORE_BYTES}",
               f"--resources={json.dumps(host.resources)}"]
        if name == "head":
            return [*cmd, "--head", f"--port={HEAD_PORT}", "--include-dashboard=false"]
        return [*cmd, f"--address={self.head_address}"]

    def kill(self, name: str) -> int:
        """The host dies: SIGKILL every process in its namespace; how many there were."""
        host = self.hosts[name]
        killed = 0
        for _ in range(20):  # a dying raylet may still fork: sweep until the namespace is empty
            pids = host.pids()
            if not pids:
                return killed
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return killed

    def close(self) -> None:
        """Tear everything down; each step is tried even when another fails."""
        for name in list(self.hosts):
            with contextlib.suppress(Exception):
                self.kill(name)
        for host in self.hosts.values():
            _ip("netns", "del", host.netns, check=False)
            shutil.rmtree(NETNS_ETC / host.netns, ignore_errors=True)
        for veth in self.veths:
            _ip("link", "del", veth, check=False)
        _ip("link", "del", self.bridge, check=False)
        shutil.rmtree(self.temp_root, ignore_errors=True)


def check_possible() -> None:
    """Raise HostsUnavailable, with the reason, when this machine cannot make the hosts."""
    if sys.platform != "linux":
        raise HostsUnavailable(f"network namespaces need Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        raise HostsUnavailable("making network namespaces needs root (run the Ray tests as root)")
    if shutil.which("ip") is None:
        raise HostsUnavailable("the `ip` command (iproute2) is not installed")
    if not Path(RAY).exists():
        raise HostsUnavailable(f"{RAY} is missing: install the ray extra (pip install "
                               "'perdure[ray]')")


def make_hosts(slots: dict[str, int], *, head_cpus: int = 1,
               cpus: dict[str, int] | None = None) -> Hosts:
    """A bridge, a head host and one host per perdure node (`perdure_node_<name>`: slots), each
    with as many Ray CPUs as slots unless `cpus` says otherwise.

    On any failure the partial set-up is torn down before the error propagates.
    """
    check_possible()
    suffix = f"{random.Random(os.getpid() ^ time.time_ns()).randrange(16**4):04x}"
    hosts = Hosts(suffix, _pick_subnet(), f"prb{suffix}",
                  Path(tempfile.mkdtemp(prefix="prd", dir="/tmp")))
    try:
        try:
            _ip("link", "add", hosts.bridge, "type", "bridge")
        except subprocess.CalledProcessError as err:
            raise HostsUnavailable(f"cannot make a bridge: {err.stderr.strip()}") from None
        _ip("addr", "add", f"{hosts.gateway}/{hosts.subnet.prefixlen}", "dev", hosts.bridge)
        _ip("link", "set", hosts.bridge, "up")
        hosts.add_host("head", 0, {}, head_cpus)
        for i, (name, n) in enumerate(slots.items(), start=1):
            # CPUs beyond the slots: Ray's own actors (num_cpus=0) need none, replicas none.
            hosts.add_host(name, i, {f"perdure_node_{name}": float(n)}, (cpus or {}).get(name, n))
        hosts.start("head")
        hosts.start(*slots)
    except BaseException:
        hosts.close()
        raise
    return hosts
