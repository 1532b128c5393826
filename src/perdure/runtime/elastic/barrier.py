"""Form one process group per membership round, without waiting on a peer that is not there.

A round's members meet in the round's own store in two phases, each settled by one
compare-and-set decision every member reads: presence (`ok` when all registered, else
`superseded`, `timeout`, or after a loss in resize mode and a grace period `partial:<names>`),
then liveness (all confirm again, so a member that registered and died is not waited for in
`init_process_group`). A round is formed again under the store's next generation `g<n>`; a
member that finds a generation settled without it waits for the next one.

Side effects: store I/O, process-group creation and teardown, socket shutdown.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perdure.runtime import transport
from perdure.runtime.elastic.rendezvous import Round
from perdure.runtime.transport import Where

__all__ = ["Formed", "Partial", "destroy_group", "init_group", "meet"]

# Seconds between store checks: fast at first (survivors arrive within milliseconds), then
# slower, leaving a starting replacement (import torch) the CPU.
_POLL_FIRST, _POLL_MAX = 0.005, 0.05


@dataclass(frozen=True)
class Partial:
    """Go on without absent members after `after` (time.monotonic()) if `allowed(present)`."""

    after: float
    allowed: Callable[[tuple[str, ...]], bool]


@dataclass(frozen=True)
class Formed:
    """How a barrier ended: "ok", "partial" (see `present`), "superseded" or "timeout"."""

    status: str
    generation: int
    present: tuple[str, ...] = ()


def _text(value: Any) -> str:
    return bytes(value).decode()


def _generation(store: Any, broken: int | None) -> int:
    """The generation to join: the current one, or the next after the one that broke."""
    current = int(_text(store.compare_set("gen", "", "0")))
    if broken is not None and current <= broken:
        current = int(_text(store.compare_set("gen", str(broken), str(broken + 1))))
    return current


def _give_up(deadline: float, superseded: Callable[[], bool]) -> str | None:
    if superseded():
        return "superseded"
    return "timeout" if time.monotonic() >= deadline else None


def _settle(store: Any, key: str, count: str, world: int, deadline: float,
            superseded: Callable[[], bool], partial: Callable[[], str | None]) -> str:
    """The decision at `key`: "ok" at `world` members, else the first give-up seen (CAS)."""
    delay = _POLL_FIRST
    while True:
        if store.check([key]):
            return _text(store.get(key))
        if int(store.add(count, 0)) >= world:
            return _text(store.compare_set(key, "", "ok"))
        give_up = _give_up(deadline, superseded) or partial()
        if give_up is not None:
            return _text(store.compare_set(key, "", give_up))
        time.sleep(delay)
        delay = min(_POLL_MAX, delay * 1.5)


def _present(store: Any, prefix: str, rnd: Round, replica: str, deadline: float,
             superseded: Callable[[], bool], partial: Partial | None) -> str:
    """Phase 1. Returns "ok", "partial:<names>", "superseded", "timeout" or "excluded"."""
    key = f"{prefix}/present-decision"
    if store.check([key]):  # settled before we came: we are not part of it
        decision = _text(store.get(key))
        return decision if decision in ("superseded", "timeout") else "excluded"
    store.set(f"{prefix}/member/{replica}", str(os.getpid()))
    store.add(f"{prefix}/present", 1)

    def go_partial() -> str | None:
        if partial is None or time.monotonic() < partial.after:
            return None
        here = tuple(r for r in rnd.replicas if store.check([f"{prefix}/member/{r}"]))
        return "partial:" + ",".join(here) if partial.allowed(here) else None

    decision = _settle(store, key, f"{prefix}/present", rnd.world_size, deadline, superseded,
                       go_partial)
    if decision.startswith("partial:") and replica not in decision[8:].split(","):
        return "excluded"  # registered just after the present members were read
    return decision


def _next_generation(store: Any, gen: int, deadline: float,
                     superseded: Callable[[], bool]) -> int | str:
    """Wait until the members move on to a newer generation; else "superseded" / "timeout"."""
    delay = _POLL_FIRST
    while True:
        current = int(_text(store.get("gen")))
        if current > gen:
            return current
        give_up = _give_up(deadline, superseded)
        if give_up is not None:
            return give_up
        time.sleep(delay)
        delay = min(_POLL_MAX, delay * 1.5)


def meet(
    where: Where,
    rnd: Round,
    replica: str,
    *,
    deadline: float,
    superseded: Callable[[], bool],
    broken_generation: int | None = None,
    partial: Partial | None = None,
    on_excluded: Callable[[], None] | None = None,
) -> tuple[Formed, Any]:
    """Both phases of `rnd`'s barrier as `replica`, and the round's store (`init_group` next).

    "partial": the members in `present` go on alone (meet `rnd.only(present, generation)`
    next). on_excluded(): a generation was settled without this replica.
    """
    store = transport.of(where).round_store(rnd.store_name)
    gen = _generation(store, broken_generation)
    while True:
        decision = _present(store, f"g{gen}", rnd, replica, deadline, superseded, partial)
        if decision != "excluded":
            break
        if on_excluded is not None:
            on_excluded()
        nxt = _next_generation(store, gen, deadline, superseded)
        if isinstance(nxt, str):
            return Formed(nxt, gen), store
        gen = nxt
    if decision.startswith("partial:"):
        present = tuple(decision[len("partial:"):].split(","))
        return Formed("partial", gen, present), store
    if decision == "ok":  # phase 2: a member that registered and then died is not waited for
        store.add(f"g{gen}/confirmed", 1)
        decision = _settle(store, f"g{gen}/confirmed-decision", f"g{gen}/confirmed",
                           rnd.world_size, deadline, superseded, lambda: None)
    return Formed(decision, gen), store


def init_group(store: Any, rnd: Round, replica: str, generation: int, backend: str,
               timeout_s: float) -> None:
    """Form `rnd`'s default process group as `replica`, in the generation `meet` settled."""
    import torch.distributed as dist

    rank = rnd.rank_of(replica)
    assert rank is not None
    before = _socket_fds()
    dist.init_process_group(
        backend, store=dist.PrefixStore(f"g{generation}/pg", store),  # type: ignore[attr-defined]
        rank=rank, world_size=rnd.world_size, timeout=datetime.timedelta(seconds=timeout_s),
    )
    _group_sockets[:] = [(fd, link) for fd, link in _socket_fds().items()
                         if before.get(fd) != link]


# The current group's connections (fd, "socket:[inode]"): leaving shuts them down, so a peer
# blocked in a collective on this process fails at once (destroy_process_group() does not).
_group_sockets: list[tuple[int, str]] = []


def _socket_fds() -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # no procfs: peers see the loss at their collective timeout instead
        return out
    for name in names:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{name}")
            if link.startswith("socket:"):
                out[int(name)] = link
    return out


def _shut_group_sockets() -> None:
    for fd, link in _group_sockets:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") != link:
                continue  # closed by gloo; the number may belong to something else now
            dup = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)  # a dup: ours to close
            try:
                # gloo's listener must stay: shutting it down aborts the process
                if not dup.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    dup.shutdown(socket.SHUT_RDWR)  # acts on the shared socket
            finally:
                dup.close()
    _group_sockets.clear()


def destroy_group() -> None:
    """Leave the current default process group, if any (a broken one included)."""
    import torch.distributed as dist

    _shut_group_sockets()
    if dist.is_available() and dist.is_initialized():
        # a broken group can fail to tear down; it is dropped either way
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
