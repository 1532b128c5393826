"""Spare launch actors: how many per node, and the settings a user can get wrong."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from perdure.backends.ray import cluster as rc
from perdure.backends.ray.spare_actors import (
    AUTO_MAX,
    DIED_BACKOFF_SECONDS,
    ENV,
    REFILL_DELAY_SECONDS,
    SpareActors,
    size_setting,
)


def test_auto_keeps_a_nodes_slots_and_twice_that_once_it_restarted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    auto = SpareActors("ns", size_setting())
    assert (auto.want("a", 2), auto.want("a", 4), auto.want("a", 64)) == (2, 4, AUTO_MAX)
    auto.refill_later("a", 100.0)  # a launch took one of a's spares
    assert (auto.want("a", 2), auto.want("a", 4), auto.want("b", 4)) == (4, AUTO_MAX, 4)
    monkeypatch.setenv(ENV, "0")
    assert SpareActors("ns", size_setting()).want("a", 4) == 0
    assert SpareActors("ns", size_setting("3")).want("a", 64) == 3


@pytest.mark.parametrize("bad", ["-1", "65", "many", ""])
def test_a_bad_setting_names_the_variable(bad: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        size_setting(bad)


def test_a_spare_is_pinned_to_its_node_without_gpus_or_cpus() -> None:
    options = rc.actor_options("a", "spare:a:0123", "ns", 0)
    assert options["name"] == "spare:a:0123" and options["lifetime"] == "detached"
    assert options["resources"] == {rc.RESOURCE_PREFIX + "a": rc.PIN}
    assert options["num_cpus"] == 0 and options["num_gpus"] == 0


def test_nothing_starts_before_the_controller_holds_the_namespace() -> None:
    spares = SpareActors("ns", None)
    spares.fill({"a": rc.RayNode("a", 2, "10.0.0.2", "id-a")})  # no owner yet: no Ray call
    assert spares.take("a") is None


def test_a_burst_of_takes_does_not_push_the_refill_back() -> None:
    spares = SpareActors("ns", None)
    spares.refill_later("a", 100.0)
    spares.refill_later("a", 100.6)  # the burst's next restart: still refilled at 101
    assert spares._not_before["a"] == 100.0 + REFILL_DELAY_SECONDS
    spares.refill_later("a", 105.0)  # a later burst waits its own delay
    assert spares._not_before["a"] == 105.0 + REFILL_DELAY_SECONDS
    spares._not_before["b"] = 100.0 + DIED_BACKOFF_SECONDS  # a node whose spare died
    spares.refill_later("b", 100.0)
    assert spares._not_before["b"] == 100.0 + DIED_BACKOFF_SECONDS
