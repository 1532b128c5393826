"""Hosts for a real multi-node Ray cluster on one machine: a network namespace per host.

Ray replaces `--node-ip-address=127.0.0.1` with the machine's external address, where no
traffic may go here, so each Ray node (the head, nodes a and b) runs in a network namespace of
its own with an address in a private /24 on a bridge; the controller stays in the root
namespace and reaches the head over the bridge. A host dies when every process in its
namespace is SIGKILLed. Names carry a random suffix so that parallel runs cannot collide.

Every packet stays on the bridge: the root namespace reaches a host only while the bridge
holds its subnet; before the bridge exists or after it is gone, the same address leaves by the
machine's default route (there, an HTTP/2 proxy answers a Ray driver's GCS call with "http2
header with status: 404"). So `assert_routed` checks `ip route get` names this cluster's
bridge before a root-namespace client connects, `close` stops every root-namespace process
connected to the subnet before the hosts and the bridge go, subnets are picked clear of every
route, address and live cluster, and the leftovers of runs that died (recorded in REGISTRY)
are removed first.
"""

from __future__ import annotations

import contextlib
import functools
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

# The Ray the test clusters run: the test venv's own (so a venv per Ray version selects it),
# or PERDURE_TEST_RAY (the `ray` command of another venv).
RAY = os.environ.get("PERDURE_TEST_RAY") or str(Path(sys.executable).with_name("ray"))
REGISTRY = Path("/tmp/perdure-test-hosts")  # <suffix>.json per live cluster: who made it
STALE_SECONDS = 6 * 3600  # an unrecorded namespace of ours this old belongs to no live run
HEAD_PORT = 6379
NETNS_ETC = Path("/etc/netns")
OBJECT_STORE_BYTES = 100 * 2**20  # perdure moves no data through Ray's object store
# Every host's interface has this name inside its namespace, as on a uniform cluster: a program
# that must be told its interface (gloo in Ray Train: GLOO_SOCKET_IFNAME) gets one setting.
IFNAME = "eth0"


class HostsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no `ip`, no ray): the reason, for a skip."""


class OffBridge(RuntimeError):
    """A test host's address would not be reached over the test's bridge."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def taken() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine routes or has an address in (any table), and those of
    live clusters (recorded: one that is being made has no route yet)."""
    words = [line.split()[0] for line in _ip("-4", "route", "show", "table", "all")
             .stdout.splitlines() if line.split()]
    words += [w for line in _ip("-4", "-o", "addr", "show").stdout.splitlines()
              for w in line.split() if "/" in w]
    words += [str(r.get("subnet")) for r in _records() if _owner_alive(r)]
    out = []
    for word in words:
        with contextlib.suppress(ValueError):  # "default", "local", ...: not a network
            out.append(ipaddress.ip_network(word, strict=False))
    return out


def _pick_subnet() -> ipaddress.IPv4Network:
    """A random 10.x.y.0/24 that no route, address or live test cluster touches."""
    used = [u for u in taken() if u.prefixlen > 0]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randint(64, 250)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise HostsUnavailable("no free private /24 found for the test hosts")


def route_device(address: str) -> str:
    """The interface the root namespace sends packets for `address` out of (no packet sent)."""
    words = _ip("-4", "route", "get", address).stdout.split()
    return words[words.index("dev") + 1] if "dev" in words else ""


# ---- what earlier runs left -------------------------------------------------------------------

def _records() -> list[dict[str, object]]:
    out = []
    for path in sorted(REGISTRY.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if isinstance(record, dict):
                out.append({**record, "path": str(path)})
    return out


def _start_ticks(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _owner_alive(record: dict[str, object]) -> bool:
    pid, ticks = record.get("pid"), record.get("ticks")
    return isinstance(pid, int) and _start_ticks(pid) == ticks


def clean_stale() -> list[str]:
    """Remove the namespaces, veths and bridges of test clusters whose maker died (recorded),
    and of unrecorded ones of our naming older than STALE_SECONDS; what was removed."""
    removed: list[str] = []
    live = {str(r.get("suffix")) for r in _records() if _owner_alive(r)}
    for record in _records():
        if not _owner_alive(record):
            removed += _remove(str(record.get("suffix")))
            Path(str(record["path"])).unlink(missing_ok=True)
    netns = Path("/run/netns")
    for ns in sorted(netns.glob("prd*")) if netns.is_dir() else []:
        suffix = ns.name[3:7]
        with contextlib.suppress(OSError):
            if suffix not in live and time.time() - ns.stat().st_mtime > STALE_SECONDS:
                removed += _remove(suffix)
    return removed


def _remove(suffix: str) -> list[str]:
    """Everything of the cluster named by `suffix`: its hosts' processes, namespaces, links."""
    gone = []
    for ns in sorted(Path("/run/netns").glob(f"prd{suffix}*")):
        for _ in range(20):
            pids = _ip("netns", "pids", ns.name, check=False).stdout.split()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.1)
        _ip("netns", "del", ns.name, check=False)
        shutil.rmtree(NETNS_ETC / ns.name, ignore_errors=True)
        gone.append(ns.name)
    for link in _ip("-o", "link", "show").stdout.splitlines():
        name = link.split(":")[1].strip().split("@")[0] if ":" in link else ""
        if name == f"prb{suffix}" or (name.startswith(f"pv{suffix}") and len(name) > 6):
            _ip("link", "del", name, check=False)
            gone.append(name)
    return gone


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
    ray: str = RAY  # the `ray` command the hosts run

    @property
    def gateway(self) -> str:
        return str(self.subnet[1])

    @property
    def head_address(self) -> str:
        return f"{self.hosts['head'].address}:{HEAD_PORT}"

    def env(self) -> dict[str, str]:
        """The environment for Ray commands and drivers of this cluster. Every client of the
        cluster takes it from here, so here the route to each host is checked (OffBridge)."""
        self.assert_routed()
        env = dict(os.environ)
        env.pop("RAY_ADDRESS", None)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["RAY_DEDUP_LOGS"] = "0"
        return env

    def assert_routed(self) -> None:
        """Raise OffBridge unless the root namespace reaches every host over this cluster's
        bridge: call it before any client here talks to a host (a missing route sends the
        packets out of the machine's default route)."""
        for host in self.hosts.values():
            device = route_device(host.address)
            if device != self.bridge:
                raise OffBridge(f"{host.address} (host {host.name}) would leave on "
                                f"{device or 'no interface'}, not on the test bridge "
                                f"{self.bridge}: refusing to connect to it")

    def stop_clients(self, timeout: float = 10.0) -> list[int]:
        """SIGKILL every root-namespace process (but this one) connected to the subnet: a
        driver, controller or client that outlived its test would retry the hosts' addresses
        out of the default route once the bridge is gone. The pids it killed."""
        import psutil

        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while True:
            pids = set()
            with contextlib.suppress(psutil.Error):
                for conn in psutil.net_connections(kind="inet4"):
                    if conn.pid and conn.pid != os.getpid() and conn.raddr and \
                            ipaddress.ip_address(conn.raddr.ip) in self.subnet:
                        pids.add(conn.pid)
            if not pids or time.monotonic() > deadline:
                return killed
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.1)

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
        `env` adds to the Ray processes' environment (Ray's own settings, say). Before Ray 2.60
        one at a time: its worker nodes keep their session in the head's temp dir, and two
        starting together race on its files ("timed out during startup")."""
        if len(names) > 1 and _version(self.ray) < (2, 60):
            for name in names:
                self.start(name, timeout=timeout, env=env)
            return
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
        cmd = ["ip", "netns", "exec", host.netns, self.ray, "start",
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
        """Tear everything down, clients first; each step is tried even when another fails."""
        with contextlib.suppress(Exception):
            self.stop_clients()
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
        (REGISTRY / f"{self.suffix}.json").unlink(missing_ok=True)

    def register(self) -> None:
        """Record this cluster as ours, so that a later run removes it if this one dies."""
        REGISTRY.mkdir(mode=0o700, exist_ok=True)
        (REGISTRY / f"{self.suffix}.json").write_text(json.dumps({
            "suffix": self.suffix, "subnet": str(self.subnet), "pid": os.getpid(),
            "ticks": _start_ticks(os.getpid()), "bridge": self.bridge}))


@functools.cache
def _version(ray: str) -> tuple[int, ...]:
    """The Ray version the `ray` command runs ("ray, version 2.50.1" -> (2, 50, 1))."""
    out = subprocess.run([ray, "--version"], capture_output=True, text=True, timeout=60).stdout
    return tuple(int(x) for x in out.split()[-1].split(".")[:3] if x.isdigit())


def check_possible(ray: str = RAY) -> None:
    """Raise HostsUnavailable, with the reason, when this machine cannot make the hosts."""
    if sys.platform != "linux":
        raise HostsUnavailable(f"network namespaces need Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        raise HostsUnavailable("making network namespaces needs root (run the Ray tests as root)")
    if shutil.which("ip") is None:
        raise HostsUnavailable("the `ip` command (iproute2) is not installed")
    if not Path(ray).exists():
        raise HostsUnavailable(f"{ray} is missing: install the ray extra (pip install "
                               "'perdure[ray]')")


def make_hosts(slots: dict[str, int], *, head_cpus: int = 1,
               cpus: dict[str, int] | None = None, start: bool = True, ray: str = RAY) -> Hosts:
    """A bridge, a head host and one host per perdure node (`perdure_node_<name>`: slots), each
    with as many Ray CPUs as slots unless `cpus` says otherwise; Ray is started on them unless
    `start` is False (the network alone); `ray`: the `ray` command they run.

    On any failure the partial set-up is torn down before the error propagates.
    """
    check_possible(ray)
    clean_stale()
    suffix = f"{random.Random(os.getpid() ^ time.time_ns()).randrange(16**4):04x}"
    hosts = Hosts(suffix, _pick_subnet(), f"prb{suffix}",
                  Path(tempfile.mkdtemp(prefix="prd", dir="/tmp")), ray=ray)
    hosts.register()  # before anything exists: a run killed now is cleaned up by the next
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
        hosts.assert_routed()  # before the first packet
        if start:
            hosts.start("head")
            hosts.start(*slots)
    except BaseException:
        hosts.close()
        raise
    return hosts
