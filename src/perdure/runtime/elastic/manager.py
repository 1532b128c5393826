"""The elastic Manager: keep the process alive across membership changes and rebuild its group.

Without a controller (no rendezvous) it is a thin wrapper over a static world.

Side effects: process-group creation, rounds and markers through the transport.
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, MutableMapping
from typing import Any, NoReturn, ParamSpec, TypeVar

from perdure.runtime import goodput
from perdure.runtime.elastic.barrier import destroy_group
from perdure.runtime.elastic.errors import (
    ElasticConfigWarning,
    MembershipChanged,
    MembershipError,
    is_membership_error,
)
from perdure.runtime.elastic.membership import GroupFinished, Membership
from perdure.runtime.elastic.rendezvous import Member, Round
from perdure.runtime.elastic.retry import (
    FROM_SPEC,
    ElasticEvent,
    ElasticSettings,
    FromSpec,
    RetryLimit,
    resolve_settings,
)
from perdure.runtime.ranks import env_int
from perdure.runtime.transport import FileTransport, Transport
from perdure.runtime.transport import current as current_transport

__all__ = ["Manager", "current_manager"]

log = logging.getLogger("perdure.elastic")
P = ParamSpec("P")
R = TypeVar("R")
DEFAULT_COLLECTIVE_TIMEOUT = 60.0
_current: Manager | None = None


def current_manager() -> Manager | None:
    """The Manager this process made last, if any (the Snapshotter finds its peers through it)."""
    return _current


class Manager:
    """One per process: this replica's view of the job's membership, and its process group.

    rdzv_dir, replica: default to $PERDURE_RDZV_DIR and $PERDURE_REPLICA (set by perdure).
    transport: where rounds and markers travel (default: this process's, from its environment;
    given a rdzv_dir, the files there).
    backend: the process-group backend (gloo on CPU; gloo + nccl with CUDA).
    collective_timeout: seconds a collective waits for a hung peer before it fails
    ($PERDURE_COLLECTIVE_TIMEOUT, default 60); a dead peer is seen at once.
    Call `perdure.init(distributed=False)` (or no init) in elastic scripts: the Manager builds
    the group, from the round, not from RANK / WORLD_SIZE.
    """

    # After a loss (resize mode): seconds to wait for every member before going on without.
    join_grace: float = 0.25

    def __init__(
        self,
        *,
        rdzv_dir: str | os.PathLike[str] | None = None,
        replica: str | None = None,
        backend: str | None = None,
        collective_timeout: float | None = None,
        transport: Transport | None = None,
    ) -> None:
        global _current
        if backend is None:
            import torch

            backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
        if transport is None:
            transport = FileTransport(rdzv_dir=rdzv_dir) if rdzv_dir else current_transport()
        self.transport = transport
        static_rank, static_world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
        self.replica = replica or os.environ.get("PERDURE_REPLICA") or f"rank-{static_rank}"
        self.node = os.environ.get("PERDURE_NODE") or "local"
        self.attempt = env_int("PERDURE_ATTEMPT", -1)
        self.backend = backend
        self.collective_timeout = float(
            collective_timeout
            or os.environ.get("PERDURE_COLLECTIVE_TIMEOUT")
            or DEFAULT_COLLECTIVE_TIMEOUT
        )
        self._static = Round.static(self.replica, static_rank, static_world, self.node)
        self._static_formed = False
        self._membership = Membership(
            transport, self.replica, self.attempt, static_world, self.backend,
            self.collective_timeout, self.join_grace) if transport.elastic else None
        self._entered = False  # the training function ran in some group of this process
        self._live = False  # ... before the current group: this process has trained state
        self._calls = 0
        self.settings, _ = resolve_settings(FROM_SPEC, os.environ)
        _current = self

    # ---- what the replica knows ---------------------------------------------------------

    @property
    def elastic(self) -> bool:
        """True under a controller that publishes membership rounds for this job."""
        return self.transport.elastic

    @property
    def current_round(self) -> Round:
        """The round this process's group was formed for (a static one without a controller)."""
        m = self._membership
        return m.round if m is not None and m.round is not None else self._static

    @property
    def formed(self) -> bool:
        """Whether this process is in a group (after `start()` or the first entry)."""
        m = self._membership
        return self._static_formed if m is None else m.round is not None

    @property
    def round(self) -> int:
        return self.current_round.round

    @property
    def members(self) -> tuple[Member, ...]:
        return self.current_round.members

    @property
    def rank(self) -> int:
        rank = self.current_round.rank_of(self.replica)
        return 0 if rank is None else rank

    @property
    def world_size(self) -> int:
        return self.current_round.world_size

    @property
    def active_ranks(self) -> list[int]:
        """Ranks of the current group, in member order (0 .. world_size - 1)."""
        return [m.rank for m in self.members]

    @property
    def all_nodes(self) -> list[str]:
        """Every node (failure domain, "slice") this job's replicas were seen on."""
        m = self._membership
        if m is None:
            return list(self._static.nodes)
        m.latest()
        return list(m.nodes)

    @property
    def active_nodes(self) -> list[str]:
        """Nodes with a member in the current group."""
        return list(self.current_round.nodes)

    @property
    def inactive_nodes(self) -> list[str]:
        """Nodes seen before that have no member in the current group."""
        active = set(self.active_nodes)
        return [n for n in self.all_nodes if n not in active]

    @property
    def available_inactive_nodes(self) -> list[str]:
        """Inactive nodes whose replicas are up and waiting to join: the group can grow now."""
        latest = self._membership.change_to() if self._membership else None
        if latest is None:
            return []
        inactive = set(self.inactive_nodes)
        return [n for n in latest.nodes if n in inactive]

    # ---- forming groups -----------------------------------------------------------------

    def start(self, *, timeout: float = 300.0, poll_interval: float = 0.1) -> None:
        """Join the group if this process has none yet (elastic_retry does this for you)."""
        if self.formed:
            return
        if self._membership is None:
            import torch.distributed as dist

            if self._static.world_size > 1 and not dist.is_initialized():
                dist.init_process_group(self.backend, timeout=datetime.timedelta(
                    seconds=self.collective_timeout))
            self._static_formed = True
            return
        self._membership.join(self.settings, 0, None, poll_interval, timeout, partial_ok=False)

    # ---- step-boundary changes ----------------------------------------------------------

    def should_reconfigure(self, every: int = 1) -> bool:
        """True (on every rank alike) when a newer round is out and any replica it adds is up.

        Call it at the same step boundary on every rank: a one-element all-reduce, every
        `every`-th call.
        """
        if self._membership is None or self._membership.round is None:
            return False
        self._calls += 1
        if self._calls % max(1, every):
            return False
        wants = self._membership.change_to() is not None
        if self.world_size == 1:
            return wants
        import torch
        import torch.distributed as dist

        flag = torch.tensor([int(wants)], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def maybe_reconfigure(self, every: int = 1) -> None:
        """Raise MembershipChanged when `should_reconfigure(every)`: elastic_retry re-enters."""
        if self.should_reconfigure(every):
            latest = self._membership.latest() if self._membership else None
            raise MembershipChanged(
                f"membership changed at a step boundary: {self.current_round.describe()} -> "
                f"{latest.describe() if latest else 'a newer round'}",
                round=self.round,
            )

    # ---- state after a change -----------------------------------------------------------

    def sync_state(self, state: MutableMapping[str, Any]) -> int | None:
        """Give every member the state of the member furthest along; return that step.

        A collective: call it on every rank right after (re-)entering the loop. The live member
        (one of the previous group) with the highest int `state["step"]` broadcasts it in place
        (RankLocal values stay per rank); nothing is sent when all are live at the same step.
        Returns that step (-1 without an int "step"), or None when no member is live (a fresh
        start: restore from a Snapshotter or a checkpoint instead).
        """
        import torch.distributed as dist

        from perdure.runtime.elastic.state import broadcast

        step = state.get("step")
        mine = (int(self._live), int(step) if isinstance(step, int) else -1)
        if self.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
            return mine[1] if self._live else None
        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, mine)
        live = [(s, -r) for r, (is_live, s) in enumerate(everyone) if is_live]
        if not live:
            return None
        best_step, neg_rank = max(live)
        if len(live) < len(everyone) or any(s != best_step for s, _ in live):
            broadcast(state, -neg_rank)
        return int(best_step)

    # ---- the retry decorator ------------------------------------------------------------

    def elastic_retry(
        self,
        minimum_replicas: int | FromSpec | None = FROM_SPEC,
        poll_interval: float = 0.1,
        timeout: float = 300.0,
        retry_policy: RetryLimit | None = None,
        pre_callback: Callable[[], None] | None = None,
        on_elastic_event: Callable[[ElasticEvent], None] | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Re-enter the decorated loop after a membership change, in the same process.

        minimum_replicas: None waits for every replica (pause); k goes on with at least k
        (resize); left out, both come from the job spec (an explicit value that disagrees is
        warned about). poll_interval: seconds between reads of the round while waiting.
        timeout: seconds to wait for a group after a loss, else TimeoutError. retry_policy: how
        many losses to survive (RetryLimit(10)).
        pre_callback(): runs after each rebuild, before re-entry. on_elastic_event(event): is
        told about each change once the group is rebuilt. A replica still waiting to join when
        the others' loop returns (training is over) exits with status 0 (SystemExit).
        """
        settings, warning = resolve_settings(minimum_replicas, os.environ)
        if warning:
            warnings.warn(warning, ElasticConfigWarning, stacklevel=2)
            log.warning("%s", warning)
        policy = retry_policy or RetryLimit()
        if poll_interval <= 0 or timeout <= 0:
            raise ValueError(
                f"poll_interval={poll_interval} and timeout={timeout} must be > 0 (seconds)")

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            @functools.wraps(fn)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                self.settings = settings
                try:  # GroupFinished: the others finished while this replica waited to join
                    self.start(timeout=timeout, poll_interval=poll_interval)
                    losses = 0
                    while True:
                        self._live, self._entered = self._entered, True
                        try:
                            result = fn(*args, **kwargs)
                            if self._membership is not None:
                                self._membership.mark_finished()
                            return result
                        except Exception as exc:
                            if not is_membership_error(exc):
                                raise
                            planned = isinstance(exc, MembershipChanged)
                            losses += 0 if planned else 1
                            self._check_retry(exc, planned, losses, policy)
                            event = self._recover(exc, planned, settings, poll_interval,
                                                  timeout, losses)
                        if on_elastic_event is not None:
                            on_elastic_event(event)
                        if pre_callback is not None:
                            pre_callback()
                except GroupFinished as done:
                    _exit_finished(done)

            return wrapper

        return decorate

    def _check_retry(self, exc: Exception, planned: bool, losses: int,
                     policy: RetryLimit) -> None:
        if not self.elastic:
            raise MembershipError(
                f"{self.replica}: a peer was lost ({type(exc).__name__}: {exc}); this process "
                "runs without a controller (no rendezvous), so its group cannot be "
                "rebuilt. Run the job with an elastic spec (min_replicas) under perdure.",
                round=self.round,
            ) from exc
        if not planned:
            decision = policy.decide(losses, exc)
            if not decision.retry:
                raise MembershipError(f"{self.replica}: {decision.reason}",
                                      round=self.round) from exc
            log.warning("%s: %s: %s", self.replica, decision.reason, exc)

    def _recover(self, exc: Exception, planned: bool, settings: ElasticSettings,
                 poll: float, timeout: float, losses: int) -> ElasticEvent:
        assert self._membership is not None
        began = time.monotonic()
        before = self.current_round
        broken = None if planned else self._membership.generation
        # planned: a later round, or the full version of the partial one we are in
        min_round = before.round + (1 if planned and not before.is_partial else 0)
        rnd = self._membership.join(settings, min_round, broken, poll, timeout,
                                    partial_ok=not planned and settings.minimum is not None)
        waited = time.monotonic() - began
        goodput.reporter().emit("elastic", round=rnd.round, world_size=rnd.world_size,
                                reason=rnd.reason, seconds=waited)
        return ElasticEvent(
            kind="changed" if planned else "lost", previous_round=before.round,
            round=rnd.round, previous_world_size=before.world_size,
            world_size=rnd.world_size, reason=rnd.reason,
            error=None if planned else f"{type(exc).__name__}: {exc}",
            waited_s=waited, retry=losses,
        )

    def close(self) -> None:
        """Leave: tear the process group down (call before os._exit)."""
        global _current
        destroy_group()
        self._static_formed = False
        if self._membership is not None:
            self._membership.round = None
        if _current is self:
            _current = None


def _exit_finished(done: GroupFinished) -> NoReturn:
    """A replica that never rejoined a group that then finished: exit 0, quietly."""
    log.warning("%s", done)
    print(str(done), file=sys.stderr, flush=True)
    destroy_group()
    raise SystemExit(0)
