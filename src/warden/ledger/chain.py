"""ContextEntry hashing and chaining (ACS spec §8.2, specs/acs.md §10).

The rule, exactly::

    content      = entry without "entry_hash" and "previous_hash"
    entry_hash   = sha256( JCS(content) ‖ bytes.fromhex(previous_hash) )   # b"" first
    chain_hash   = entry_hash of the newest entry

Warden's entries carry, inside the hashed content, what a later reader needs to
re-check the decision: ``request_hash``, the ``verdict`` (decision, reason codes,
the rules and bundle that fired) and, for Warden-authored events, their own
fields. Optional members are omitted, never ``null``, so hashes reproduce.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from warden.crypto.canonical import canonical_bytes
from warden.crypto.jcs_fast import JcsRoute

HASH_FIELDS = ("entry_hash", "previous_hash")


def entry_content(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The hashed content of an entry: everything but ``entry_hash``/``previous_hash``."""
    return {k: v for k, v in entry.items() if k not in HASH_FIELDS}


def compute_entry_hash(
    content: Mapping[str, Any], previous_hash: str | None, *, within: JcsRoute | None = None
) -> str:
    """§8.2 entry hash of ``content`` chained on ``previous_hash`` (lowercase hex).
    ``within``: the JCS route of ``content`` when the caller knows it (as for
    :func:`~warden.crypto.canonical.canonical_bytes`).

    Raises :class:`~warden.errors.InvalidRequest` if ``content`` is outside the
    JCS domain, and ``ValueError`` if ``previous_hash`` is not hex.
    """
    prev = bytes.fromhex(previous_hash) if previous_hash else b""
    return hashlib.sha256(canonical_bytes(dict(content), within=within) + prev).hexdigest()


def chain_entry(
    content: Mapping[str, Any], previous_hash: str | None, *, within: JcsRoute | None = None
) -> dict[str, Any]:
    """Return ``content`` completed with ``previous_hash`` and ``entry_hash``
    (``within``: as for :func:`compute_entry_hash`).

    The first entry of a session has no ``previous_hash`` member (spec: null or
    absent on the first entry; Warden omits it).
    """
    entry = dict(content)
    for field in HASH_FIELDS:
        entry.pop(field, None)
    entry_hash = compute_entry_hash(entry, previous_hash, within=within)
    if previous_hash is not None:
        entry["previous_hash"] = previous_hash
    entry["entry_hash"] = entry_hash
    return entry
