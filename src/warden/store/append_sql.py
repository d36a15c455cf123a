"""SQL text shared by the PostgreSQL one-statement appends (``store/sql.py`` ``_PG_APPEND``,
``store/spend_sql.py`` ``_CHAINED_APPEND_LEAF``). It imports nothing, so both modules can
use it without a cycle.

:data:`LEAF_AND_ENTRY` ends a ``WITH`` whose ``head`` CTE moved a chain's head: it numbers
the entry by bumping the transparency log's counter only when the head moved (``leaf``:
gapless, no round trip) and inserts the entry with that index. Parameters: ``seq``,
``hash``, ``step_id``, ``step_type``, ``entry``, ``response``, ``now``, ``request``.
"""

from __future__ import annotations

LEAF_AND_ENTRY = """, leaf AS (
  UPDATE log_state SET next_index = next_index + 1
  WHERE id = 1 AND EXISTS (SELECT 1 FROM head)
  RETURNING next_index - 1 AS i
)
INSERT INTO entries (session_id, seq, entry_hash, step_id, step_type, entry, response,
                     created_at, request, log_index)
SELECT head.session_id, %(seq)s, %(hash)s, %(step_id)s, %(step_type)s, %(entry)s,
       %(response)s, %(now)s, %(request)s, leaf.i
FROM head, leaf
"""
