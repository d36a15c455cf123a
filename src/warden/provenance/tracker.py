"""Keeps each session's :class:`~warden.provenance.graph.SessionProvenance` by chain head.

Why no table of its own: the state is a pure function of the session's committed
chain entries (each stores the request params exactly as hashed, and the verdict), so
any replica can rebuild it with :meth:`Store.iter_records` and reach the same state;
nothing can drift from the audit record, and a step that did not commit leaves no
trace. The in-process cache is keyed by the head hash it was computed at, so a stale
entry (another replica moved the head) is never used: a miss rebuilds from the store.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from warden.provenance.graph import SessionProvenance, rebuild
from warden.store.base import SessionState, Store

_CACHE_SESSIONS = 4096


class ProvenanceTracker:
    """Per-session provenance state for one store. Thread-safe."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, tuple[str | None, SessionProvenance]] = OrderedDict()

    def state(self, session: SessionState) -> SessionProvenance:
        """The state after ``session``'s last committed entry (its ``head_hash``).

        Raises what :meth:`Store.iter_records` raises (``StoreUnavailable``,
        ``IntegrityError``); the wire turns that into a fail-closed deny.
        """
        with self._lock:
            hit = self._cache.get(session.session_id)
        if hit is not None and hit[0] == session.head_hash:
            return hit[1]
        if session.head_hash is None:
            state = SessionProvenance()
        else:
            state, head = rebuild(self.store.iter_records(session.session_id))
            if head != session.head_hash:
                # The store moved on while we read: use what we read, do not cache it.
                return state
        self._remember(session.session_id, session.head_hash, state)
        return state

    def committed(self, session_id: str, head_hash: str, state: SessionProvenance) -> None:
        """Record the state after a step whose entry (``head_hash``) just committed."""
        self._remember(session_id, head_hash, state)

    def _remember(self, sid: str, head: str | None, state: SessionProvenance) -> None:
        with self._lock:
            self._cache[sid] = (head, state)
            self._cache.move_to_end(sid)
            while len(self._cache) > _CACHE_SESSIONS:
                self._cache.popitem(last=False)
