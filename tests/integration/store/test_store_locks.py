"""Opening a store never costs another connection of the same process its locks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from perdure.store.sqlite import Store

# Another process reads the database and closes: its sqlite deletes the WAL on close when it
# can take the database's exclusive lock, which it can only if this process lost its own.
OTHER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA journal_mode=WAL")
db.execute("SELECT count(*) FROM jobs").fetchone()
db.close()
"""


def test_a_second_store_in_the_process_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    path = tmp_path / "state" / "perdure.db"
    first = Store(path)
    first.db.execute("SELECT count(*) FROM jobs").fetchone()
    second = Store(path)  # e.g. another thread of `perdure serve`
    subprocess.run([sys.executable, "-c", OTHER, str(path)], check=True)
    assert Path(f"{path}-wal").exists()
    assert first.db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert second.db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    first.close()
    second.close()



# Forks from a fresh interpreter: forking the test process (other tests' stores left threads
# and sqlite locks in it) can leave a child stuck on a lock it inherited held.
RACE = """
import multiprocessing, sys
from pathlib import Path
from perdure.store.sqlite import Store

def open_new(path, start, answers):
    start.wait()
    try:
        Store(Path(path)).close()
        answers.put("ok")
    except StoreError as exc:
        answers.put(str(exc))

ctx = multiprocessing.get_context("fork")
for i in range(40):
    start, answers = ctx.Barrier(3), ctx.Queue()
    path = Path(sys.argv[1]) / str(i) / "perdure.db"
    procs = [ctx.Process(target=open_new, args=(str(path), start, answers)) for _ in range(3)]
    for proc in procs:
        proc.start()
    got = [answers.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(60)
    if got != ["ok"] * 3:
        sys.exit(f"round {i}: {got}")
"""


def test_processes_that_open_a_new_state_dir_at_once_all_get_it(tmp_path: Path) -> None:
    """A controller starting while `perdure submit` runs: both create the state dir's database
    at the same moment. sqlite answered one of them "database is locked" (about 1 in 10 on
    this machine), and the command exited 2."""
    r = subprocess.run([sys.executable, "-c", RACE, str(tmp_path)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
