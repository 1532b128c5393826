"""`--state-dir` after the subcommand works as before it."""

from __future__ import annotations

import pytest

from perdure.cli.main import hoist_state_dir


@pytest.mark.parametrize(("argv", "expected"), [
    (["perdure", "logs", "j", "--state-dir", "X"], ["perdure", "--state-dir", "X", "logs", "j"]),
    (["perdure", "describe", "--state-dir=X", "j", "--json"],
     ["perdure", "--state-dir=X", "describe", "j", "--json"]),
    (["perdure", "--state-dir", "X", "ls"], ["perdure", "--state-dir", "X", "ls"]),
    (["perdure", "export", "k8s", "s.yaml", "--state-dir", "X"],
     ["perdure", "--state-dir", "X", "export", "k8s", "s.yaml"]),
    (["perdure", "run", "s.yaml", "--", "--state-dir", "X"],
     ["perdure", "run", "s.yaml", "--", "--state-dir", "X"]),
    # the last one wins, wherever each stands (typer takes the last)
    (["perdure", "--state-dir", "A", "--state-dir", "B", "controller"],
     ["perdure", "--state-dir", "A", "--state-dir", "B", "controller"]),
    (["perdure", "--state-dir", "A", "ls", "--state-dir=B"],
     ["perdure", "--state-dir", "A", "--state-dir=B", "ls"]),
])
def test_state_dir_moves_before_the_subcommand(argv: list[str], expected: list[str]) -> None:
    assert hoist_state_dir(argv) == expected


def test_a_state_dir_without_its_value_is_named() -> None:
    with pytest.raises(ValueError, match="--state-dir needs a directory"):
        hoist_state_dir(["perdure", "ls", "--state-dir"])
