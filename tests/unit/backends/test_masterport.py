"""Rank 0's port (backends/masterport.py): one per master key, asked of rank 0's node once."""

from __future__ import annotations

from perdure.backends.masterport import NO_PORT, MasterPorts, local_port


def test_every_launch_of_a_key_gets_one_port_and_a_new_round_a_new_one() -> None:
    asked = iter(["30001", "30001", "30002"])  # the node offers the old round's port again
    ports = MasterPorts()
    assert ports.port("j", "j-1.0", lambda: next(asked)) == "30001"
    assert ports.port("j", "j-1.0", lambda: "never asked") == "30001"
    assert ports.port("j", "j-1.1", lambda: next(asked)) == "30002"


def test_a_node_that_cannot_answer_gives_the_default_and_is_asked_again() -> None:
    ports = MasterPorts()
    assert ports.port("j", "j-1.0", lambda: None) == NO_PORT
    assert ports.port("j", "j-1.0", lambda: "30005") == "30005"


def test_a_local_port_is_a_port_number() -> None:
    assert 0 < int(local_port()) < 65536
