"""Stack captures of real processes with py-spy (backends.stacks), and what happens where it
cannot attach; and the progress reader that feeds the watchdog (backends.local.progress)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from perdure.backends.local.progress import ProgressReader
from perdure.backends.stacks import dump_pid
from perdure.core import stacks

SLEEPER = """
import threading, time
def waiting_for_godot():
    time.sleep(60)
threading.Thread(target=lambda: time.sleep(60), name="helper", daemon=True).start()
print("ready", flush=True)
waiting_for_godot()
"""


def test_every_thread_of_a_process_that_never_imported_perdure() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        dump = dump_pid(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert dump.error is None, dump.error
    assert {t["thread_name"] for t in dump.threads} == {"MainThread", "helper"}
    summary = stacks.summarize(dump.threads)
    assert summary.attached and not summary.in_collective
    assert summary.where.startswith("waiting_for_godot (")
    assert "waiting_for_godot" in stacks.render(dump.threads)


def test_a_process_that_is_gone_gives_the_reason_instead_of_stacks() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dump = dump_pid(proc.pid)
    assert dump.threads == [] and dump.error is not None
    assert dump.error.startswith(f"py-spy could not read pid {proc.pid}: ")


def test_progress_is_read_incrementally_and_a_half_written_line_waits(tmp_path: Path) -> None:
    reader, f = ProgressReader(), tmp_path / "progress.jsonl"
    f.write_text(json.dumps({"kind": "start", "t": 1.0}) + "\n")
    assert reader.read("l", str(tmp_path), 0.0) is None  # no step yet: says nothing
    steps = {"kind": "steps", "t": 2.0, "first": 1, "last": 4, "seconds": 2.0, "count": 4}
    save = {"kind": "checkpoint_save", "t": 2.5, "step": 4, "seconds": 0.3}
    with f.open("a") as out:
        out.write(json.dumps(steps) + "\n" + json.dumps(save) + "\n" + '{"kind": "ste')
    assert reader.read("l", str(tmp_path), 0.1) is None  # too soon after the last read
    p = reader.read("l", str(tmp_path), 1.0)
    assert p is not None and (p.step, p.steps, p.step_seconds, p.save_seconds) == (
        4, 4, 0.5, 0.3)
    assert p.time <= time.time()
    with f.open("a") as out:  # the cut line completes; a data wait alone counts as progress
        out.write('ps", "first": 5, "last": 5, "seconds": 1.0, "count": 1}\n')
        out.write(json.dumps({"kind": "data_wait", "t": 3.0, "seconds": 0.1}) + "\n")
    p = reader.read("l", str(tmp_path), 2.0)
    assert p is not None and (p.step, p.steps, p.save_seconds) == (5, 1, None)
