"""Node health: which failures point at the machine, and when a node is quarantined.

No side effects beyond the tick's copies: `strike` and `fence` change its nodes and events.
The rule (docs/guides/node-health.md): a failure that points at the machine (FAULTS, a lost
node) is a strike against its node, within `window_seconds`; the same failure of one replica on
two nodes is the script's, and nodes lost together lost what they share: neither counts. A
node with `max_node_failures` strikes, or a failed preflight check, is QUARANTINED until
`perdure node restore`.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import signal
from collections.abc import Callable, Iterable, Mapping

from perdure.core.policy import Failure, nccl_kind
from perdure.core.records import Node, Strike
from perdure.core.text import plural
from perdure.core.tick import Tick

NODE_LOST = "node lost"
HEALTH_CHECK = "health check"
# Nodes lost this close together lost something they share (a switch, a rack's power)
SHARED_LOSS_SECONDS = 30.0

_NATIVE = {int(s): s.name for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL)}
# Errors of the GPU or its driver, as CUDA and the kernel word them. A device-side assert or
# CUDA's out of memory is the script's.
_GPU_TEXT: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ECC error", re.compile(r"\bECC\b.{0,40}error|uncorrectable ECC", re.I)),
    ("Xid error", re.compile(r"\bXid\b")),
    ("GPU lost", re.compile(r"fallen off the bus|GPU is lost|GPU lost", re.I)),
    ("CUDA error", re.compile(r"CUDA error: (?!.*(device-side assert|out of memory))", re.I)),
)


def _signal_of(f: Failure) -> int | None:
    if f.signal is not None:
        return f.signal
    return f.exit_code - 128 if 128 < f.exit_code < 160 else None


def _native(f: Failure) -> str | None:
    sig = _signal_of(f)
    return _NATIVE.get(sig) if sig is not None else None


def _nccl(f: Failure) -> str | None:
    # a collective timeout or communication error points at a lost peer, not at this node
    kind = nccl_kind(f.error)
    return kind if kind in ("NCCL CUDA error", "NCCL internal error") else None


def _gpu(f: Failure) -> str | None:
    if f.error is None:
        return None
    text = f"{f.error.type}: {f.error.message}"
    return next((kind for kind, pattern in _GPU_TEXT if pattern.search(text)), None)


# Each failure that points at the machine, by kind: the first that names one wins.
FAULTS: tuple[Callable[[Failure], str | None], ...] = (_native, _nccl, _gpu)


def machine_fault(f: Failure) -> str | None:
    """The kind of machine fault `f` is ("SIGSEGV", "NCCL CUDA error", ...), or None when it
    points at the script (an exception, its OOM), a peer, or a notice."""
    if f.exit_code == 0 or f.oom or f.notice is not None or f.node_lost is not None:
        return None
    return next((kind for kind in map(lambda fault: fault(f), FAULTS) if kind), None)


def _script_faults(nodes: Iterable[Node]) -> set[tuple[str, str, str]]:
    """(job, replica, kind) that failed the same way on two different nodes."""
    seen: dict[tuple[str, str, str], str] = {}
    twice: set[tuple[str, str, str]] = set()
    for node in nodes:
        for s in node.strikes:
            if not s.replica:
                continue
            key = (s.job, s.replica, s.kind)
            if seen.setdefault(key, node.name) != node.name:
                twice.add(key)
    return twice


def _shared_losses(nodes: Iterable[Node]) -> set[tuple[str, float]]:
    """(node, time) of each loss within SHARED_LOSS_SECONDS of another node's."""
    losses = sorted((s.time, n.name) for n in nodes for s in n.strikes if s.kind == NODE_LOST)
    shared: set[tuple[str, float]] = set()
    for (t1, n1), (t2, n2) in itertools.pairwise(losses):
        if t2 - t1 <= SHARED_LOSS_SECONDS and n1 != n2:
            shared |= {(n1, t1), (n2, t2)}
    return shared


def counted(node: Node, nodes: Mapping[str, Node]) -> list[Strike]:
    """The strikes that count against `node`: not the script's faults nor shared losses."""
    mine = [s for s in node.strikes if s.replica]
    excused = _script_faults(nodes.values()) if mine else set()
    lost = any(s.kind == NODE_LOST for s in node.strikes)
    shared = _shared_losses(nodes.values()) if lost else set()
    return [s for s in node.strikes if (s.job, s.replica, s.kind) not in excused
            and (node.name, s.time) not in shared]


def strike(t: Tick, name: str, s: Strike) -> None:
    """Hold `s` against node `name`; fence the node once its strikes reach the limit."""
    limits = t.settings.health
    node = t.nodes.get(name)
    if node is None or limits.max_node_failures == 0:
        return
    since = t.now - limits.window_seconds
    kept = (*(x for x in node.strikes if x.time > since), s)
    t.nodes[name] = node = dataclasses.replace(node, strikes=kept)
    t.nodes_changed = True
    if s.replica and (s.job, s.replica, s.kind) in _script_faults(t.nodes.values()):
        where = sorted(n.name for n in t.nodes.values() if any(
            (x.job, x.replica, x.kind) == (s.job, s.replica, s.kind) for x in n.strikes))
        job = t.jobs.get(s.job)
        t.event(job, "health", f"{s.replica} failed with {s.kind} on nodes {', '.join(where)}: "
                               "the script's fault, not the nodes' (not counted against them)")
        for other in where:
            _unfence_excused(t, other)
        return
    if s.kind == NODE_LOST:
        together = sorted(n.name for n in t.nodes.values() if n.name != name and any(
            x.kind == NODE_LOST and abs(x.time - s.time) <= SHARED_LOSS_SECONDS
            for x in n.strikes))
        for other in together:  # a fence their earlier losses alone earned is lifted
            _unfence_excused(t, other)
        if together:
            return
    against = counted(node, t.nodes)
    if node.fence or len(against) < limits.max_node_failures:
        return
    window = f"{limits.window_seconds:g}s"
    reason = (f"{plural(len(against), 'failure')} within {window}: "
              + "; ".join(x.describe() for x in against))
    if not any(n.schedulable for n in t.nodes.values() if n.name != name):
        # Fencing the only node would stop everything and move nothing: say it instead.
        t.event(None, "health", f"node {name} not quarantined, being the only ready node: "
                                f"{reason}")
        return
    fence(t, name, reason)


def _unfence_excused(t: Tick, name: str) -> None:
    """Lift a fence that only the script's own faults had earned."""
    node = t.nodes[name]
    if not node.fence or node.fence.startswith(HEALTH_CHECK):
        return
    if len(counted(node, t.nodes)) < t.settings.health.max_node_failures:
        t.nodes[name] = dataclasses.replace(node, fence="")
        t.nodes_changed = t.active = True
        t.event(None, "node", f"node {name} no longer quarantined: its failures were the "
                              "script's own")


def fence(t: Tick, name: str, reason: str) -> None:
    """Quarantine node `name`: nothing new is placed there, its replicas move as for a drain."""

    node = t.nodes.get(name)
    if node is None or node.fence:
        return
    t.nodes[name] = dataclasses.replace(node, fence=reason)
    t.nodes_changed = t.active = True
    t.event(None, "node", f"node {name} QUARANTINED: {reason}; nothing new is placed there "
                          f"until `perdure node restore {name}`")
    if node.state.schedulable:  # a lost node's replicas are gone with it
        t.move_off(name, "quarantined", f"node {name} quarantined")


def lift(t: Tick, name: str) -> bool:
    """`perdure node restore`: forget the node's fence and strikes; whether it was fenced."""
    node = t.nodes.get(name)
    if node is None or not (node.fence or node.strikes):
        return False
    t.nodes[name] = dataclasses.replace(node, fence="", strikes=())
    t.nodes_changed = t.active = True
    return bool(node.fence)
