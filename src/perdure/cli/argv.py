"""`--state-dir` anywhere on the command line: `perdure logs JOB --state-dir X` as
`perdure --state-dir X logs JOB`.

No side effects: a pure rewrite of argv, before typer parses it.
"""

from __future__ import annotations

OPTION = "--state-dir"


def hoist_state_dir(argv: list[str]) -> list[str]:
    """`argv` with every `--state-dir X` / `--state-dir=X` that follows the subcommand moved
    before it (the last one wins, as typer takes it). Nothing after `--` is touched. A
    `--state-dir` after the subcommand without its value raises ValueError (typer would
    call it an unknown option)."""
    head, rest = argv[:1], argv[1:]
    end = rest.index("--") if "--" in rest else len(rest)
    moved: list[str] = []
    kept: list[str] = []
    i = 0
    while i < end:
        arg = rest[i]
        if arg.startswith(f"{OPTION}="):
            moved.append(arg)
        elif arg == OPTION and kept:
            if i + 1 >= end:
                raise ValueError(f"{OPTION} needs a directory: {OPTION} DIR")
            moved += [arg, rest[i + 1]]
            i += 1
        else:
            kept.append(arg)
        i += 1
    return [*head, *moved, *kept, *rest[end:]]
