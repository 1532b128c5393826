"""The log relay on real FIFOs and a real writer process: byte-exact stream files, whole lines
in the merged file, a partial line (a progress bar) once its stream is quiet, all of it by
close."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from perdure.backends.node.logrelay import PARTIAL_SECONDS, LogRelay

WRITER = """
import sys, time
sys.stderr.write("10%\\r"); sys.stderr.flush()
time.sleep(float(sys.argv[1]))
print("line one", flush=True)
time.sleep(0.05)  # lines microseconds apart on two streams may swap; these may not
sys.stderr.write("20%\\r100%\\n"); sys.stderr.flush()
sys.stdout.write("no newline at the end"); sys.stdout.flush()
"""


def test_the_relay_copies_both_streams_and_merges_whole_lines(tmp_path: Path) -> None:
    out, err, merged = tmp_path / "w.out", tmp_path / "w.err", tmp_path / "w.log"
    relay = LogRelay(str(tmp_path), {"out": str(out), "err": str(err)}, str(merged), "=== h\n")
    relay.start()
    with open(relay.paths["out"], "wb") as o, open(relay.paths["err"], "wb") as e:
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(PARTIAL_SECONDS * 3)],
                                stdout=o, stderr=e)
    deadline = time.monotonic() + 30
    while b"10%" not in merged.read_bytes():  # the bar shows before its line ends
        assert time.monotonic() < deadline and proc.poll() in (None, 0)
        time.sleep(0.02)
    assert proc.wait(timeout=30) == 0
    relay.close()
    assert out.read_bytes() == b"line one\nno newline at the end"
    assert err.read_bytes() == b"10%\r20%\r100%\n"
    assert merged.read_bytes() == (b"=== h\n10%\rline one\n20%\r100%\nno newline at the end")
    assert not any(p.name.endswith(".fifo") for p in tmp_path.iterdir())
    assert not any(t.is_alive() for t in relay.threads)


FLOOD = """
import os, sys, time
newlines, mib = sys.argv[1] == "1", int(sys.argv[2])
chunk = (b"x" * 1023 + b"\\n") * 64 if newlines else b"x" * 65536
marks = [time.monotonic()]
for i in range(1, mib * 16 + 1):
    os.write(1, chunk)
    if i % 128 == 0:
        marks.append(time.monotonic())  # every 8 MiB the relay took
print(" ".join(str(m - marks[0]) for m in marks), file=sys.stderr)
"""


def flood(tmp_path: Path, newlines: bool, mib: int) -> list[float]:
    """Send `mib` MiB through a relay in 64 KiB writes; when each 8 MiB had gone through."""
    where = tmp_path / ("lines" if newlines else "bytes")
    where.mkdir()
    merged = where / "w.log"
    relay = LogRelay(str(where), {"out": str(where / "w.out"), "err": str(where / "w.err")},
                     str(merged))
    relay.start()
    try:
        with open(relay.paths["out"], "wb") as o:
            done = subprocess.run([sys.executable, "-c", FLOOD, str(int(newlines)), str(mib)],
                                  stdout=o, stderr=subprocess.PIPE, timeout=120, check=True)
    finally:
        relay.close()
    assert (where / "w.out").stat().st_size == merged.stat().st_size == mib << 20
    return [float(t) for t in done.stderr.split()]


def test_output_without_newlines_goes_through_in_linear_time(tmp_path: Path) -> None:
    # Each read used to rebuild the whole pending line: 96 MiB without a newline took 50 s.
    for newlines in (True, False):
        marks = flood(tmp_path, newlines, 96)
        first, last = marks[3] - marks[0], marks[12] - marks[9]  # 24 MiB each
        assert last <= 4 * first + 2.0, (newlines, marks)  # not growing with what is pending


BUSY = """
import sys, time
for i in range(40):  # 4 s: a progress bar on stderr, dots on stdout, neither ever ends a line
    sys.stderr.write(f"\\r{i:3d}%|" + "#" * i); sys.stderr.flush()
    sys.stdout.write("."); sys.stdout.flush()
    time.sleep(0.1)
"""


def test_a_progress_bar_and_a_busy_partial_line_reach_the_merged_file(tmp_path: Path) -> None:
    merged = tmp_path / "w.log"
    relay = LogRelay(str(tmp_path), {"out": str(tmp_path / "w.out"),
                                     "err": str(tmp_path / "w.err")}, str(merged))
    relay.start()

    def shows(what: bytes, within: float, times: int = 1) -> None:
        began = time.monotonic()
        while merged.read_bytes().count(what) < times:
            assert proc.poll() is None, merged.read_bytes()  # while the replica still writes
            assert time.monotonic() - began < within, (what, merged.read_bytes())
            time.sleep(0.02)

    try:
        with open(relay.paths["out"], "wb") as o, open(relay.paths["err"], "wb") as e:
            proc = subprocess.Popen([sys.executable, "-c", BUSY], stdout=o, stderr=e)
        shows(b"|##", 30)  # the bar's second redraw (the interpreter's start takes a while)
        shows(b"|" + b"#" * 7, 2.0)  # five redraws (0.5 s) later, with leeway for a busy machine
        dots = merged.read_bytes().count(b".")
        shows(b".", 2.0, dots + 5)  # the dots too, though their line never ends
        assert proc.wait(timeout=30) == 0
    finally:
        relay.close()
    data = merged.read_bytes()
    assert data.count(b".") == 40 and data.count(b"\r") == 40 and b" 39%|" + b"#" * 39 in data
