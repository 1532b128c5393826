"""`slurm.sbatch_args`: the options a cluster file may add to every holder job's sbatch, and
those it may not because perdure sets them or reads them back (backends/slurm/slurmcmd.py).

Each spelling is read as sbatch's getopt_long reads it (`--opt=value`, `--opt value`, a
prefix of a long name, `-Jx`, `-J x`, bundled `-kJx`). No side effects.
"""

from __future__ import annotations

# long name -> (its short letter or "", why perdure needs it as it sets it)
_NAMES = "perdure names the holder job and finds it again by its name"
_NODES = "perdure chooses every node of the allocation (its replicas' and the spares')"
_SIZE = "perdure sizes the allocation from the job's pools"
_HOLDER = "the holder script perdure submits holds the allocation and relays Slurm's signals"
_FIELD = "set it with the cluster file's slurm.{} instead"
REFUSED: dict[str, tuple[str, str]] = {
    "job-name": ("J", _NAMES),
    "parsable": ("", "perdure reads the job id from sbatch's parsable answer"),
    "wrap": ("", _HOLDER),
    "signal": ("", "perdure asks for the time limit's warning signal (B:USR1) itself"),
    "output": ("o", "perdure sends the holder's output to /dev/null"),
    "error": ("e", "perdure sends the holder's output to /dev/null"),
    "input": ("i", _HOLDER),
    "no-kill": ("k", "perdure keeps an allocation that lost a node (it replaces the node)"),
    "nodelist": ("w", _NODES),
    "nodefile": ("F", _NODES),
    "exclude": ("x", _NODES + "; drain a bad node in Slurm instead"),
    "nodes": ("N", _SIZE),
    "ntasks": ("n", "perdure runs one task (its node agent) per node"),
    "ntasks-per-node": ("", "perdure runs one task (its node agent) per node"),
    "cpus-per-task": ("c", _SIZE + " (slots)"),
    "gres": ("", _SIZE + " (gpus per replica)"),
    "gpus": ("G", _SIZE + " (gpus per replica)"),
    "gpus-per-node": ("", _SIZE + " (gpus per replica)"),
    "gpus-per-task": ("", _SIZE + " (gpus per replica)"),
    "time": ("t", _FIELD.format("time_limit")),
    "partition": ("p", _FIELD.format("partition")),
    "account": ("A", _FIELD.format("account")),
    "qos": ("q", _FIELD.format("qos")),
    "chdir": ("D", "perdure starts the holder in / (a directory every node has)"),
    "comment": ("", "perdure reads Slurm's notices (time limit, preemption) from the job's "
                "comment"),
    "array": ("a", "perdure submits one holder job per attempt, not an array"),
    "wait": ("W", "sbatch must answer at once (perdure follows the job with squeue)"),
    "test-only": ("", "nothing would be submitted"),
    "hold": ("H", "a held holder never starts: the job would wait for capacity forever"),
    "clusters": ("M", "perdure follows its jobs on the cluster it talks to (squeue --me)"),
    "help": ("h", "sbatch would print its help and submit nothing"),
    "usage": ("", "sbatch would print its usage and submit nothing"),
    "version": ("V", "sbatch would print its version and submit nothing"),
}
_BY_SHORT = {short: long for long, (short, _) in REFUSED.items() if short}
# sbatch's short options that take no value (every other letter takes one: -A x, -Ax)
_SHORT_FLAGS = frozenset("hHkOQsvVW")
# long options allowed here that take no value (or only an attached `=value`): the word after
# them is not theirs
_LONG_FLAGS = frozenset({
    "contiguous", "exclusive", "ignore-pbs", "no-requeue", "overcommit", "oversubscribe",
    "quiet", "reboot", "requeue", "spread-job", "use-min-nodes", "verbose", "get-user-env",
    "propagate", "nice",
})
# allowed long options that are a prefix of a refused one (an exact name wins in getopt_long)
_EXACT = frozenset({"exclusive", "time-min", "gres-flags", "gpu-bind", "gpu-freq", "mem",
                    "cpus-per-gpu"})


def _long(word: str) -> str | None:
    """The refused long option `--word` stands for (its full name), if any."""
    if word in REFUSED:
        return word
    if word in _EXACT:
        return None
    matches = [name for name in REFUSED if name.startswith(word)]
    return matches[0] if len(word) >= 2 and matches else None


def _refusal(written: str, name: str) -> str:
    short = REFUSED[name][0]
    spelled = f"--{name}" + (f"/-{short}" if short else "")
    shown = spelled if written in (f"--{name}", f"-{short}") else f"{written} ({spelled})"
    return f"{shown}: {REFUSED[name][1]}; remove it"


def refusals(args: list[str]) -> list[tuple[int, str]]:
    """(index, line) for each argument of `args` that sbatch_args may not hold: the option as
    written, its full name and why perdure sets it itself."""
    out: list[tuple[int, str]] = []
    expects_value = False
    for i, arg in enumerate(args):
        if expects_value:  # the previous option's value: getopt takes it whatever it holds,
            expects_value = False  # but a refused option there is refused all the same
            if not arg.startswith("-"):
                continue
        if arg.startswith("--") and len(arg) > 2:
            word, has_value = arg[2:].split("=", 1)[0], "=" in arg
            name = _long(word)
            if name:
                out.append((i, _refusal(f"--{word}"[:40], name)))
            expects_value = not has_value and word not in _LONG_FLAGS
        elif arg.startswith("-") and len(arg) > 1:
            lines: list[str] = []
            expects_value = _short_bundle(arg, lines)
            out += [(i, line) for line in lines]
        else:
            out.append((i, "not an option: sbatch would run it as the job's script in place "
                        "of perdure's holder; give options only (e.g. --mem=64G)"))
    return out


def _short_bundle(arg: str, refused: list[str]) -> bool:
    """Check `-abc` as getopt reads it; whether the next argument is the last letter's value."""
    for at, letter in enumerate(arg[1:], start=1):
        name = _BY_SHORT.get(letter)
        if name:
            where = f" in {arg[:40]}" if len(arg) > 2 else ""
            refused.append(_refusal(f"-{letter}{where}", name))
        if letter not in _SHORT_FLAGS:
            return at == len(arg) - 1  # the rest of the word is its value, else the next one
    return False


__all__ = ["REFUSED", "refusals"]
