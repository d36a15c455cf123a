"""bench/wal_pages.py's WAL reader (issue 16, twelfth session): it splits a real SQLite
WAL file into its committed transactions and names each frame's page."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from wal_pages import commits  # noqa: E402


def test_commits_are_read_from_a_real_wal(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # every frame stays in the WAL
    conn.execute("CREATE TABLE small (x INTEGER)")
    conn.execute("CREATE TABLE big (x TEXT)")
    conn.execute("INSERT INTO small VALUES (1)")  # one leaf page
    conn.execute("BEGIN")
    for _ in range(3):  # three rows of ~3 kB: a page each, under a new interior page
        conn.execute("INSERT INTO big VALUES (?)", ("y" * 3000,))
    conn.execute("COMMIT")
    names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    wal = Path(f"{db}-wal").read_bytes()
    conn.close()

    done = commits(wal)
    assert len(done) == 4  # two CREATEs, the single insert, the three-row transaction
    single, three = done[2], done[3]
    assert [names.get(p) for p in single] == ["small"]
    big_pages = [p for p in three if names.get(p) == "big"]
    # A ~3 kB row fills a 4 kB page: three leaves and the root above them.
    assert len(set(big_pages)) == 4


def test_a_partial_frame_at_the_end_is_not_a_commit() -> None:
    header = b"\x37\x7f\x06\x82" + b"\0" * 4 + (512).to_bytes(4, "big") + b"\0" * 20
    frame = (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\0" * 16 + b"p" * 512
    assert commits(header + frame) == [[2]]
    assert commits(header + frame + frame[:100]) == [[2]]
    uncommitted = (3).to_bytes(4, "big") + b"\0" * 20 + b"q" * 512
    assert commits(header + frame + uncommitted) == [[2]]
