"""Rebuild state from the log's events and compare it with the tables (issue 17).

Today: API keys. Every ``api_keys`` row must be what the ``keys.*`` leaves say —
its principal, role, groups and credential digest as created (or as it existed at the
upgrade, ``keys.existing``), revoked exactly when a ``keys.revoked`` leaf says so. A
row no leaf explains (inserted by hand), a role raised, a credential swapped or a
revocation undone is reported with the row and the leaf it contradicts.

Not yet rebuilt here (the chains cover their history, not their tables): tasks and
votes, agents, budgets' caps, usage and holds.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, text

from warden.identity.api_keys import secret_digest
from warden.tlog.audit import LogProblem


def _key_events(engine: Engine) -> dict[str, tuple[int, dict[str, Any]]]:
    """key_id -> (index of the last leaf about it, the state the leaves imply)."""
    state: dict[str, tuple[int, dict[str, Any]]] = {}
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT log_index, event FROM log_events WHERE kind LIKE 'keys.%' ORDER BY 1")
        ).all()
    for index, raw in rows:
        event = json.loads(raw)
        key_id = event.get("key_id")
        if event["kind"] in ("keys.created", "keys.registered", "keys.existing"):
            state[key_id] = (
                int(index),
                {
                    "principal": event["principal"],
                    "role": event["role"],
                    "groups": list(event["groups"]),
                    "secret": event["secret"],
                    "revoked": event.get("revoked_at") is not None,
                },
            )
        elif event["kind"] == "keys.revoked" and key_id in state:
            state[key_id] = (int(index), state[key_id][1] | {"revoked": True})
    return state


def check_state(engine: Engine) -> None:
    """LogProblem(``state_mismatch``) at the first table row the log's events contradict."""
    # Rows first, then events: a key a running Warden creates in between has its event
    # read too (they commit together). A revocation in between can still be reported;
    # verify a stopped Warden, or run it again.
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT key_id, principal, role, groups, secret_hash, revoked_at "
                "FROM api_keys ORDER BY key_id"
            )
        ).all()
    implied = _key_events(engine)
    seen = set()
    for key_id, principal, role, groups, secret_hash, revoked_at in rows:
        seen.add(key_id)
        found = implied.get(key_id)
        if found is None:
            raise LogProblem(
                "state_mismatch", f"api_keys row {key_id}: no log event created this key"
            )
        index, want = found
        have = {
            "principal": principal,
            "role": role,
            "groups": json.loads(groups),
            "secret": secret_digest(secret_hash),
            "revoked": revoked_at is not None,
        }
        for column in ("principal", "role", "groups", "secret", "revoked"):
            if have[column] != want[column]:
                raise LogProblem(
                    "state_mismatch",
                    f"api_keys row {key_id}: {column} is {have[column]!r}, the log "
                    f"(leaf {index}) says {want[column]!r}",
                    index,
                )
    missing = sorted(set(implied) - seen)
    if missing:
        index = implied[missing[0]][0]
        raise LogProblem(
            "state_mismatch",
            f"api_keys row {missing[0]} is gone, the log (leaf {index}) created it",
            index,
        )
