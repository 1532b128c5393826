"""The backend surface: one base class whose capabilities every backend has (a default that
does nothing, or says it cannot), and the spare-node holds a backend keeps from `hold_nodes`."""

from __future__ import annotations

import pytest

from perdure.backends.base import Backend, NodeInfo
from perdure.backends.fake import FakeBackend
from perdure.backends.spareholds import SpareHolds
from perdure.core.events import HoldNodes, Launch, Observation, Stop


class Bare(Backend):
    """Only what every backend must do."""

    def nodes(self) -> list[NodeInfo]:
        return []

    def launch(self, launch: Launch) -> None:
        pass

    def stop(self, stop: Stop) -> None:
        pass

    def poll(self) -> list[Observation]:
        return []

    def adopt(self, launch_ids: list[str]) -> list[Observation]:
        return []

    def kill_node(self, node: str) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_backend_without_a_capability_takes_it_as_a_no_op_and_cannot_dump_stacks() -> None:
    bare = Bare()
    bare.hold_nodes(HoldNodes("j", 1, ("a",)))
    bare.fence_nodes({"a": "bad disk"})
    dump = bare.dump_stacks("j-1-worker-0", 1.0)
    assert dump.threads == [] and dump.error == "the Bare cannot capture stacks"


def test_a_backend_missing_a_required_method_cannot_be_made() -> None:
    methods = {name: getattr(Bare, name) for name in Backend.__abstractmethods__}
    assert set(methods) == {"nodes", "launch", "stop", "poll", "adopt", "kill_node", "close"}
    del methods["poll"]
    with pytest.raises(TypeError, match="poll"):
        type("NoPoll", (Backend,), methods)()


def test_every_backend_class_is_a_backend() -> None:
    from perdure.backends.kubernetes.backend import KubernetesBackend
    from perdure.backends.local.backend import LocalBackend
    from perdure.backends.ray.backend import RayBackend
    from perdure.backends.slurm.backend import SlurmBackend

    for cls in (LocalBackend, FakeBackend, RayBackend, SlurmBackend, KubernetesBackend):
        assert issubclass(cls, Backend), cls
        assert not cls.__abstractmethods__, cls


def test_holds_keep_each_attempts_last_word_and_their_union() -> None:
    holds = SpareHolds()
    assert holds.update(HoldNodes("j", 1, ("c", "d"))) == ("j", "1")
    holds.update(HoldNodes("k", 2, ("e",)))
    assert holds.nodes() == {"c", "d", "e"}
    holds.update(HoldNodes("j", 1, ("d",)))  # spare c took a replica: d alone is held
    assert holds.of("j", "1") == {"d"} and holds.nodes() == {"d", "e"}
    assert holds.among("j", "1", ["a", "d"]) and not holds.among("j", "1", ["c"])
    holds.update(HoldNodes("j", 1, ()))  # the attempt ended
    assert holds.of("j", "1") == frozenset() and holds.nodes() == {"e"}
    assert not holds.among("j", "2", ["e"])  # another attempt holds nothing
