"""Transparency-log verifier speed (issue 17): leaves checked per second, one process.

Builds a SQLite database with N leaves of realistic size (the stored JSON of an ACS
entry is ≈1 KB) as ``log_events`` rows, signs a checkpoint over them, then times what
``warden verify`` does for the log: read every leaf in index order, hash its stored
bytes (no re-canonicalization), build the tree, and check the signed checkpoint.

    python bench/tlog_verify.py --leaves 200000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from warden.store import open_store, tlog_sql
from warden.tlog.audit import check_log
from warden.tlog.note import NoteSigner, NoteVerifier
from warden.tlog.service import TransparencyLog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--leaves", type=int, default=200_000)
    parser.add_argument("--bytes", type=int, default=1000, help="approximate leaf size")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'warden.db'}"
        store = open_store(url, sqlite_sync="NORMAL")
        pad = "x" * args.bytes
        began = time.perf_counter()
        batch = 5000
        for start in range(0, args.leaves, batch):
            with store.transaction() as tx:
                for i in range(start, min(start + batch, args.leaves)):
                    tx.log_event("bench.leaf", {"i": i, "pad": pad})
        written = time.perf_counter() - began
        signer = NoteSigner("bench.invalid/log", Ed25519PrivateKey.generate())
        TransparencyLog(store.engine, signer).checkpoint()
        notes = [c.note for c in tlog_sql.all_checkpoints(store.engine)]
        began = time.perf_counter()
        report = check_log(
            tlog_sql.iter_leaf_pages(store.engine),
            notes,
            verifier=NoteVerifier(signer.name, signer.public),
            paged=True,
        )
        total = time.perf_counter() - began
        store.close()
    print(
        json.dumps(
            {
                "leaves": report.leaves,
                "leaf_bytes": args.bytes,
                "write_seconds": round(written, 2),
                "verify_seconds": round(total, 3),
                "leaves_per_second_read_and_verify": round(report.leaves / total),
                "leaves_per_second_hash_and_tree": round(report.leaves / report.seconds),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
