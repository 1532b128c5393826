"""What the CLI prints of user data: every control character shown, none obeyed."""

from __future__ import annotations

import pytest

from perdure.cli.terminal import visible


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain text, é 日本 👍 [red]x[/red]", "plain text, é 日本 👍 [red]x[/red]"),
    ("\x1b]0;TITLE\x07", "^[]0;TITLE^G"),
    ("\x1b[31mred\x1b[0m\x1b[2K", "^[[31mred^[[0m^[[2K"),
    ("a\nforged\r", "a\\nforged\\r"),
    ("tab\tstays\x00\x7f", "tab\tstays^@^?"),
    ("\x9b2J \u202eevil", "\\x9b2J \\u202eevil"),
])
def test_control_characters_are_shown(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(shown) == shown  # shown text stays as it is: escaping twice changes nothing


def test_a_field_of_several_lines_keeps_its_newlines() -> None:
    assert visible("one\x1b[2K\ntwo\r", one_line=False) == "one^[[2K\ntwo\\r"
