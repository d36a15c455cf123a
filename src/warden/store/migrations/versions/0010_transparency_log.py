"""The transparency log (issue 17): every audit entry is a leaf of one Merkle tree.

* ``entries.log_index``: the entry's global, gapless leaf index (unique). Existing
  entries are numbered in the order they were written (``created_at``, then session and
  seq), so a database upgraded with history has that history in its log too.
* ``log_events``: leaves that are no chain entry (server starts, bundle loads, API key
  changes): the event's JSON text, hashed as stored. Each API key that exists is
  recorded as a ``keys.existing`` leaf, the state later key events build on.
* ``log_state``: one row, ``next_index``, the index the next leaf gets; read and
  written once per write transaction that appends (:mod:`warden.store.sql`).
* ``log_checkpoints``: the signed checkpoints (C2SP tlog-checkpoint notes) by tree size.
* ``log_cosignatures``: witnesses' cosignature lines (C2SP tlog-cosignature) per
  checkpoint.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_BATCH = 5000


def upgrade() -> None:
    op.add_column("entries", sa.Column("log_index", sa.BigInteger, nullable=True))
    conn = op.get_bind()
    keys = conn.execute(
        sa.text("SELECT session_id, seq FROM entries ORDER BY created_at, session_id, seq")
    ).all()
    update = sa.text("UPDATE entries SET log_index = :i WHERE session_id = :s AND seq = :q")
    for start in range(0, len(keys), _BATCH):
        conn.execute(
            update,
            [
                {"i": start + n, "s": k[0], "q": k[1]}
                for n, k in enumerate(keys[start : start + _BATCH])
            ],
        )
    op.create_index("uq_entries_log_index", "entries", ["log_index"], unique=True)
    op.create_table(
        "log_events",
        sa.Column("log_index", sa.BigInteger, primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "log_state",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("next_index", sa.BigInteger, nullable=False),
    )
    # The API keys that exist are the starting state the log's key events build on.
    now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    rows = conn.execute(
        sa.text(
            "SELECT key_id, principal, role, groups, secret_hash, revoked_at FROM api_keys "
            "ORDER BY created_at, key_id"
        )
    ).all()
    events = []
    for n, r in enumerate(rows):
        detail = {
            "kind": "keys.existing",
            "at": now,
            "key_id": r[0],
            "principal": r[1],
            "role": r[2],
            "groups": json.loads(r[3]),
            "secret": hashlib.sha256(r[4].encode("ascii")).hexdigest(),
            "revoked_at": r[5],
        }
        events.append(
            {
                "i": len(keys) + n,
                "k": "keys.existing",
                "e": json.dumps(detail, ensure_ascii=False, separators=(",", ":")),
                "c": now,
            }
        )
    if events:
        conn.execute(
            sa.text(
                "INSERT INTO log_events (log_index, kind, event, created_at) "
                "VALUES (:i, :k, :e, :c)"
            ),
            events,
        )
    conn.execute(
        sa.text("INSERT INTO log_state (id, next_index) VALUES (1, :n)"),
        {"n": len(keys) + len(events)},
    )
    op.create_table(
        "log_checkpoints",
        sa.Column("tree_size", sa.BigInteger, primary_key=True),
        sa.Column("root_hash", sa.String(64), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "log_cosignatures",
        sa.Column("tree_size", sa.BigInteger, nullable=False),
        sa.Column("witness", sa.String(255), nullable=False),
        sa.Column("key_id", sa.String(8), nullable=False),
        sa.Column("line", sa.Text, nullable=False),
        sa.Column("timestamp", sa.BigInteger, nullable=False),
        sa.Column("received_at", sa.String(40), nullable=False),
        sa.PrimaryKeyConstraint("tree_size", "witness", "key_id", name="pk_log_cosignatures"),
    )


def downgrade() -> None:
    op.drop_table("log_cosignatures")
    op.drop_table("log_checkpoints")
    op.drop_table("log_events")
    op.drop_table("log_state")
    op.drop_index("uq_entries_log_index", table_name="entries")
    op.drop_column("entries", "log_index")
