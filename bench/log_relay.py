"""What merging a replica's stdout and stderr costs it: a child writing many lines to stdout
and stderr, straight into files (before) against through the log relay's FIFOs (now).

    python bench/log_relay.py [--lines 200000] [--runs 3]

Prints the child's own write time per run and the ratio relay / direct (best of the runs,
measured in the same run, so machine load cancels out as far as it can).

    python bench/log_relay.py --flood 96 [--runs 3]

Sends 96 MiB through the relay in 64 KiB writes, once as lines of 1 KiB and once without any
newline (a progress bar, a binary dump), and prints the time of each and the ratio (the relay
used to rebuild the pending line at each read: quadratic without newlines).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from perdure.backends.node.logrelay import LogRelay

CHILD = """
import sys, time
n = int(sys.argv[1])
line = "x" * 99 + "\\n"
began = time.perf_counter()
for i in range(n):
    (sys.stderr if i % 4 == 0 else sys.stdout).write(line)
sys.stdout.flush(); sys.stderr.flush()
print(time.perf_counter() - began, file=open(sys.argv[2], "w"))
"""


def run_child(lines: int, out: str, err: str, result: Path) -> float:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # as the supervisor sets it
    with open(out, "ab") as o, open(err, "ab") as e:
        subprocess.run([sys.executable, "-c", CHILD, str(lines), str(result)], stdout=o,
                       stderr=e, env=env, check=True)
    return float(result.read_text())


def once(lines: int, tmp: Path, relay: bool) -> float:
    for f in tmp.iterdir():
        f.unlink()
    files = {"out": str(tmp / "w.out"), "err": str(tmp / "w.err")}
    if not relay:
        return run_child(lines, files["out"], files["err"], tmp / "result")
    r = LogRelay(str(tmp), files, str(tmp / "w.log"))
    r.start()
    seconds = run_child(lines, r.paths["out"], r.paths["err"], tmp / "result")
    r.close()
    assert (tmp / "w.log").stat().st_size == lines * 100
    return seconds


FLOOD = """
import os, sys, time
chunk = (b"x" * 1023 + b"\\n") * 64 if sys.argv[1] == "1" else b"x" * 65536
began = time.perf_counter()
for _ in range(int(sys.argv[2]) * 16):
    os.write(1, chunk)
print(time.perf_counter() - began, file=open(sys.argv[3], "w"))
"""


def flood(mib: int, tmp: Path, newlines: bool) -> float:
    """Seconds for `mib` MiB in 64 KiB writes to go through a relay (the child's own time)."""
    for f in tmp.iterdir():
        f.unlink()
    r = LogRelay(str(tmp), {"out": str(tmp / "w.out"), "err": str(tmp / "w.err")},
                 str(tmp / "w.log"))
    r.start()
    with open(r.paths["out"], "wb") as o:
        subprocess.run([sys.executable, "-c", FLOOD, str(int(newlines)), str(mib),
                        str(tmp / "result")], stdout=o, check=True)
    r.close()
    assert (tmp / "w.log").stat().st_size == mib << 20
    return float((tmp / "result").read_text())


def main_flood(mib: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lines = [flood(mib, tmp, True) for _ in range(runs)]
        bare = [flood(mib, tmp, False) for _ in range(runs)]
    print(f"{mib} MiB in 64 KiB writes through the relay, best of {runs}:")
    for what, xs in (("1 KiB lines", lines), ("no newline", bare)):
        print(f"  {what:12} {min(xs):.3f} s, {mib / min(xs):.0f} MiB/s  (runs: "
              f"{', '.join(f'{x:.3f}' for x in xs)})")
    print(f"  ratio no newline / lines: {min(bare) / min(lines):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--flood", type=int, metavar="MIB",
                        help="time MIB MiB in 64 KiB writes, with and without newlines")
    args = parser.parse_args()
    if args.flood:
        main_flood(args.flood, args.runs)
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        direct, relayed = [], []
        for _ in range(args.runs):
            direct.append(once(args.lines, tmp, relay=False))
            relayed.append(once(args.lines, tmp, relay=True))
    mb = args.lines * 100 / 1e6
    print(f"{args.lines} lines ({mb:.0f} MB), 1 in 4 to stderr, best of {args.runs}:")
    print(f"  direct to files   {min(direct):.3f} s  (runs: "
          f"{', '.join(f'{x:.3f}' for x in direct)})")
    print(f"  through the relay {min(relayed):.3f} s  (runs: "
          f"{', '.join(f'{x:.3f}' for x in relayed)})")
    print(f"  ratio relay / direct: {min(relayed) / min(direct):.2f}x")


if __name__ == "__main__":
    main()
