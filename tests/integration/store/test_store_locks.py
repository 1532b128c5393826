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
