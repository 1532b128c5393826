"""Why a replica could not start, as its exit record says it, and whether its command is to
blame (then no retry can help: the job fails at once, naming the file). No side effects.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from perdure.backends.node import procs


def spawn_failure(spec: dict[str, Any], err: Exception) -> tuple[str, bool]:
    """What exit.json says of a replica that could not start, and whether its command is to
    blame (then no retry can help: the job fails at once, naming the file)."""
    exe = str(spec["command"][0])
    path = _where(exe, spec)
    code = err.errno if isinstance(err, procs.ExecError) else None
    if code == errno.ENOEXEC:  # an executable file the kernel cannot run: no #! line
        return (f"cannot start {exe!r}: {path} is not a program this system can run (exec: "
                "Exec format error); a script needs a first line naming its interpreter, "
                "such as #!/bin/sh or #!/usr/bin/env python3", True)
    message = f"cannot start {exe!r}: {err}"
    if code == errno.ENOENT and os.path.isfile(path):
        message += " (the file exists: is the interpreter on its #! line missing?)"
    return message, code in (errno.ENOENT, errno.EACCES)


def _where(exe: str, spec: dict[str, Any]) -> str:
    """The file `exe` names, as exec looks it up (relative to the replica's cwd, or on PATH)."""
    if os.sep in exe:
        return os.path.normpath(os.path.join(str(spec["cwd"]), exe))
    env = spec.get("env") if isinstance(spec.get("env"), dict) else {}
    for folder in os.get_exec_path(env if env and "PATH" in env else None):
        candidate = os.path.join(folder, exe)
        if os.path.isfile(candidate):
            return candidate
    return exe
