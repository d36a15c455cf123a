"""Which b-trees one ACS ask's commit writes on SQLite (issue 16, twelfth session).

Starts the shared scenario's Warden (``bench/warden_case.py`` ``ScenarioWarden``, the
20-rule bundle, SQLite ``--sync``) from the checkout on ``PYTHONPATH``, answers
``--warm`` asks, then ``--asks`` more, and reads the WAL file's frame headers: each
commit's frames (the page numbers up to the commit frame) are named by SQLite's
``dbstat`` table (page 1 holds the database header). Prints the frames per commit by
b-tree over the last ``--asks`` commits (the WAL is not checkpointed that fast: 20 asks
take ~10 ms) and the stored row's sizes.

    PYTHONPATH=src python bench/wal_pages.py [--sync FULL] [--asks 20] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3
import struct
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scenario_bundle import BUNDLE_PATH, DEFAULT_PEERS_DIR  # noqa: E402


def commits(wal: bytes) -> list[list[int]]:
    """The page numbers of each committed transaction in a WAL file's bytes (SQLite's
    WAL format: a 32-byte header with the page size at offset 8, then frames of a
    24-byte header, whose first two big-endian words are the page number and, on a
    commit frame, the database size, followed by the page)."""
    page_size = struct.unpack(">I", wal[8:12])[0]
    size = page_size + 24
    done: list[list[int]] = []
    current: list[int] = []
    for off in range(32, len(wal) - size + 1, size):
        page, commit = struct.unpack(">II", wal[off : off + 8])
        current.append(page)
        if commit:
            done.append(current)
            current = []
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sync", default="FULL", choices=["NORMAL", "FULL"])
    ap.add_argument("--warm", type=int, default=40)
    ap.add_argument("--asks", type=int, default=20)
    ap.add_argument("--peers-dir", type=Path, default=DEFAULT_PEERS_DIR)
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    sys.path.insert(0, str(ns.peers_dir))
    import scenario
    from warden_case import ScenarioWarden

    work = Path(tempfile.mkdtemp(prefix="warden-bench-wal-"))
    warden = ScenarioWarden(work, BUNDLE_PATH, ns.sync)
    try:
        for body in warden.bodies(scenario.REQUEST, ns.warm + ns.asks):
            answer = warden.handle(body)
            if answer["result"]["decision"] != "ask":
                raise SystemExit(f"the scenario's request was not answered ask: {answer}")
        db = next(work.rglob("warden.db"))
        wal = Path(f"{db}-wal").read_bytes()
        with sqlite3.connect(db) as conn:
            names = dict(conn.execute("SELECT pageno, name FROM dbstat"))
            sizes = conn.execute(
                "SELECT avg(length(entry)), avg(length(response)), avg(length(request)) "
                "FROM entries"
            ).fetchone()
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        warden.close()
    last = commits(wal)[-ns.asks :]
    by_tree: collections.Counter[str] = collections.Counter()
    for pages in last:
        for page in pages:
            by_tree["page 1 (header)" if page == 1 else names.get(page, f"page {page}")] += 1
    result = {
        "sync": ns.sync,
        "page_size": page_size,
        "commits": len(last),
        "frames_per_commit": sum(map(len, last)) / len(last),
        "frames_by_btree": {k: v / len(last) for k, v in by_tree.most_common()},
        "row_bytes": dict(zip(("entry", "response", "request"), sizes, strict=True)),
    }
    if ns.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['frames_per_commit']:.2f} frames of {page_size} bytes per commit")
    for name, frames in result["frames_by_btree"].items():
        print(f"  {frames:5.2f} {name}")
    print("row bytes: " + ", ".join(f"{k} {v:.0f}" for k, v in result["row_bytes"].items()))


if __name__ == "__main__":
    main()
