"""One replica's membership: which round it is in, which round to join next, and joining it.

After a loss it joins the newest round that includes this replica and satisfies the minimum
(the same round again when nothing newer is out); a newer round published meanwhile wins.

Side effects: reads rounds and writes markers through the transport, forms process groups.
"""

from __future__ import annotations

import functools
import logging
import time

from perdure.runtime.elastic import barrier as bar
from perdure.runtime.elastic import rendezvous as rz
from perdure.runtime.elastic.rendezvous import Round
from perdure.runtime.elastic.retry import ElasticSettings
from perdure.runtime.transport import Transport

__all__ = ["GroupFinished", "Membership"]

log = logging.getLogger("perdure.elastic")


class GroupFinished(Exception):
    """The other members finished training while this replica was still waiting to join."""


class Membership:
    """The rounds seen and the round this process's group was formed for."""

    def __init__(self, transport: Transport, replica: str, attempt: int, full_size: int,
                 backend: str, collective_timeout: float, join_grace: float) -> None:
        self.transport, self.replica, self.attempt = transport, replica, attempt
        self.backend, self.collective_timeout = backend, collective_timeout
        self.join_grace = join_grace
        self.full_size = full_size  # pause mode waits for this many
        self.round: Round | None = None
        self.generation = 0
        self.nodes: dict[str, None] = {}
        self._watcher = rz.RoundWatcher(transport)

    def latest(self) -> Round | None:
        """The newest round published (one stat() when nothing changed)."""
        rnd = self._watcher.latest()
        for n in (rnd.nodes if rnd else ()):
            self.nodes.setdefault(n, None)
        return rnd

    def is_newer(self, rnd: Round) -> bool:
        """A round to move to: a later one, or the full version of the partial one we are in."""
        if not (rnd.attempt == self.attempt or self.attempt < 0):
            return False
        current = self.round
        return current is None or rnd.round > current.round or (
            current.is_partial and rnd.round == current.round)

    def joiners_ready(self, rnd: Round) -> bool:
        """Every member of `rnd` that is not in our group said it is up and joining `rnd`."""
        current = set(self.round.replicas) if self.round else set()
        return all((self.transport.ready_round(rnd.attempt, m.replica) or -1) >= rnd.round
                   for m in rnd.members if m.replica not in current)

    def change_to(self) -> Round | None:
        """A newer round whose added replicas are all ready: change to it at this boundary."""
        latest = self.latest()
        ready = latest is not None and self.is_newer(latest) and self.joiners_ready(latest)
        return latest if ready else None

    def mark_finished(self) -> None:
        """The training loop returned in this member: replicas still joining can stop."""
        if self.attempt >= 0:
            self.transport.mark_finished(self.attempt, self.replica,
                             self.round.round if self.round else -1)

    def need(self, settings: ElasticSettings) -> int:
        return settings.minimum if settings.minimum is not None else self.full_size

    def acceptable(self, rnd: Round, settings: ElasticSettings) -> bool:
        need = self.need(settings)
        same_attempt = rnd.attempt == self.attempt or self.attempt < 0
        return same_attempt and self.replica in rnd.replicas and rnd.world_size >= need

    # ---- joining --------------------------------------------------------------------------

    def join(self, settings: ElasticSettings, min_round: int, broken: int | None,
             poll: float, timeout: float, *, partial_ok: bool) -> Round:
        """Form the group of the newest acceptable round numbered >= `min_round`; `broken`: the
        generation whose group broke; `partial_ok`: go on with the members present."""
        deadline = time.monotonic() + timeout
        while True:
            rnd = self._await_round(settings, min_round, deadline, poll, timeout)
            if self.round is None:  # a new replica: tell the members it is up
                self.transport.mark_ready(rnd.attempt, self.replica, rnd.round)
            formed = self._form(rnd, settings, deadline, self._broken_generation(rnd, broken),
                                self._partial_policy(rnd, settings) if partial_ok else None)
            if formed.status == "partial":
                rnd = rnd.only(formed.present, formed.generation)
                formed = self._form(rnd, settings, deadline, None, None)
            if formed.status == "ok":
                self._adopt(rnd, formed.generation)
                return rnd
            self._check_finished()  # the barrier was left because the others are done
            if formed.status == "timeout":
                raise TimeoutError(
                    f"{self.replica}: {rnd.describe()} could not be formed within "
                    f"{timeout:g}s: not every member {list(rnd.replicas)} joined. See "
                    "`perdure describe` for the missing replicas, or raise timeout=."
                )
            min_round = rnd.round + 1  # superseded by a newer round

    def _form(self, rnd: Round, settings: ElasticSettings, deadline: float,
              broken: int | None, partial: bar.Partial | None) -> bar.Formed:
        bar.destroy_group()
        formed, store = bar.meet(
            self.transport, rnd, self.replica, deadline=deadline,
            superseded=functools.partial(self._superseded, rnd, settings),
            broken_generation=broken, partial=partial,
            on_excluded=functools.partial(self.transport.mark_ready, rnd.attempt,
                                          self.replica, rnd.round))
        if formed.status == "ok":
            bar.init_group(store, rnd, self.replica, formed.generation, self.backend,
                           self.collective_timeout)
        return formed

    def _check_finished(self) -> None:
        if self.attempt >= 0 and self.transport.finished(self.attempt):
            raise GroupFinished(
                f"{self.replica}: the other members finished training while this replica was "
                "waiting to join; there is nothing left for it to do")

    def _await_round(self, settings: ElasticSettings, min_round: int, deadline: float,
                     poll: float, timeout: float) -> Round:
        while True:
            self._check_finished()
            latest = self.latest()
            if latest is not None and latest.round >= min_round and self.acceptable(
                    latest, settings):
                return latest
            if time.monotonic() >= deadline:
                seen = latest.describe() if latest else "none published yet"
                raise TimeoutError(
                    f"{self.replica}: no membership round with at least {self.need(settings)} "
                    f"replicas including {self.replica} was published within {timeout:g}s "
                    f"({settings.mode} mode, from the {settings.source}); latest: {seen} in "
                    f"{self.transport.where()}. Raise timeout=, lower minimum_replicas, or see "
                    "`perdure describe` for why replicas are missing.")
            time.sleep(poll)

    def _broken_generation(self, rnd: Round, broken: int | None) -> int | None:
        """Which generation of `rnd`'s store to move past (None: join the current one)."""
        current = self.round
        if current is None or rnd.round != current.round:
            return None
        # from a partial group back to the full round, or the same group again after a loss
        return current.partial if current.is_partial else broken

    def _partial_policy(self, rnd: Round, settings: ElasticSettings) -> bar.Partial:
        """After a loss: go on with the members present after `join_grace`, if enough."""
        return bar.Partial(time.monotonic() + self.join_grace,
                           lambda present: self.acceptable(rnd.only(present, 0), settings))

    def _superseded(self, rnd: Round, settings: ElasticSettings) -> bool:
        if self.attempt >= 0 and self.transport.finished(self.attempt):
            return True  # nobody will come: join() raises GroupFinished
        latest = self.latest()
        # a partial round is not superseded by its full version: that is a planned change
        return latest is not None and latest.round > rnd.round and self.acceptable(
            latest, settings)

    def _adopt(self, rnd: Round, generation: int) -> None:
        self.round, self.generation = rnd, generation
        self.full_size = max(self.full_size, rnd.world_size)  # its nodes: seen by latest()
        log.info("%s joined %s as rank %s", self.replica, rnd.describe(),
                 rnd.rank_of(self.replica))
