"""The log relay on real FIFOs and a real writer process: byte-exact stream files, whole lines
in the merged file, a partial line (a progress bar) once its stream is quiet, all of it by
close."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from perdure.backends.local.logrelay import PARTIAL_SECONDS, LogRelay

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
