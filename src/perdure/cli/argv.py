"""`--state-dir` anywhere on the command line: `perdure logs JOB --state-dir X` as
`perdure --state-dir X logs JOB`.

No side effects: a pure rewrite of argv, before typer parses it.
"""

from __future__ import annotations

OPTION = "--state-dir"


def hoist_state_dir(argv: list[str]) -> list[str]:
    """`argv` with every `--state-dir X` / `--state-dir=X` that follows the subcommand moved
    to just before it, after those already there: the last one on the line wins, as typer
    takes it. Nothing after `--` is touched. A `--state-dir` after the subcommand without its
    value raises ValueError (typer would call it an unknown option)."""
    head, rest = argv[:1], argv[1:]
    end = rest.index("--") if "--" in rest else len(rest)
    before: list[str] = []  # the options ahead of the subcommand, as they are
    moved: list[str] = []
    kept: list[str] = []  # the subcommand and what follows it
    i = 0
    while i < end:
        arg = rest[i]
        if not kept and not arg.startswith("-"):
            kept.append(arg)  # the subcommand
        elif arg.startswith(f"{OPTION}="):
            (moved if kept else before).append(arg)
        elif arg == OPTION:
            if i + 1 >= end:
                raise ValueError(f"{OPTION} needs a directory: {OPTION} DIR")
            (moved if kept else before).extend([arg, rest[i + 1]])
            i += 1
        else:
            (kept if kept else before).append(arg)
        i += 1
    return [*head, *before, *moved, *kept, *rest[end:]]
