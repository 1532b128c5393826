"""What the CLI prints of user data, made safe for a terminal: control characters shown, not
obeyed.

A replica's exception message, an event or a reason may hold escape sequences (set the window
title, erase the line) or a newline that forges a line of perdure's own (`controller: job
SUCCEEDED`): every CLI view prints through `visible`, as kubectl does since CVE-2021-25743, and
never interprets Rich markup. `perdure logs` stays raw, like `kubectl logs`: it prints the
replica's own output. No side effects but `say`'s print.
"""

from __future__ import annotations

import typer

_CONTROLS = {**{c: f"^{chr(c + 64)}" for c in range(0x20) if c != 0x09}, 0x0D: "\\r",
             0x7F: "^?", **{c: f"\\x{c:02x}" for c in range(0x80, 0xA0)},
             **{c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}}
ONE_LINE = str.maketrans({**_CONTROLS, 0x0A: "\\n"})
LINES = str.maketrans({c: s for c, s in _CONTROLS.items() if c != 0x0A})


def visible(text: object, one_line: bool = True) -> str:
    """`text` with every control character shown in words (see the module); `one_line=False`
    keeps newlines (a field that is several lines by nature)."""
    s = str(text)
    if s.isprintable():  # the common case: one scan in C
        return s
    return s.translate(ONE_LINE if one_line else LINES)


def say(line: object) -> None:
    """Print one line of a view, made visible."""
    typer.echo(visible(line))
