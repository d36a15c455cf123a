"""Keeps each session's :class:`~warden.provenance.graph.SessionProvenance` by chain head.

Why no table of its own: the state is a pure function of the session's committed
chain entries (each stores the request params exactly as hashed, and the verdict), so
any replica can rebuild it with :meth:`Store.iter_records` and reach the same state;
nothing can drift from the audit record, and a step that did not commit leaves no
trace. The in-process cache is keyed by the head hash it was computed at, so a stale
entry (another replica moved the head) is never used: a miss rebuilds from the store.

The cache is bounded by bytes, not by a session count (decision 197): each entry is
charged :meth:`SessionProvenance.approx_bytes` and the least recently used sessions are
evicted once the total passes ``budget_bytes``; an evicted session is rebuilt from its
chain when it returns, and decides exactly as before. A state larger than the whole
budget is not cached at all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from warden.provenance.graph import SessionProvenance, rebuild
from warden.store.base import SessionState, Store

#: Default byte budget of one process's provenance cache (``--provenance-cache-bytes``):
#: room for a dozen sessions at the default node limit, or thousands of ordinary ones.
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


class ProvenanceTracker:
    """Per-session provenance state for one store, cached within ``budget_bytes``.
    Thread-safe."""

    def __init__(self, store: Store, budget_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be 0 or more")
        self.store = store
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        # session id -> (head hash, state, bytes charged), least recently used first.
        self._cache: OrderedDict[str, tuple[str | None, SessionProvenance, int]] = OrderedDict()
        self._bytes = 0
        #: Sessions evicted to stay within the budget, and rebuilds from the store (since start).
        self.evictions = 0
        self.rebuilds = 0

    @property
    def cached_bytes(self) -> int:
        """Bytes charged to the cached states now (at most ``budget_bytes``)."""
        return self._bytes

    def cached_sessions(self) -> list[str]:
        """Ids of the cached sessions, least recently used first."""
        with self._lock:
            return list(self._cache)

    def state(self, session: SessionState) -> SessionProvenance:
        """The state after ``session``'s last committed entry (its ``head_hash``).

        Raises what :meth:`Store.iter_records` raises (``StoreUnavailable``,
        ``IntegrityError``); the wire turns that into a fail-closed deny.
        """
        with self._lock:
            hit = self._cache.get(session.session_id)
            if hit is not None and hit[0] == session.head_hash:
                self._cache.move_to_end(session.session_id)
                return hit[1]
        if session.head_hash is None:
            state = SessionProvenance()
        else:
            self.rebuilds += 1
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
        size = state.approx_bytes()
        with self._lock:
            old = self._cache.pop(sid, None)
            if old is not None:
                self._bytes -= old[2]
            if size > self.budget_bytes:
                # Cannot fit even alone: keeping it would break the budget.
                self.evictions += 1
                return
            self._cache[sid] = (head, state, size)
            self._bytes += size
            while self._bytes > self.budget_bytes:
                _, (_, _, freed) = self._cache.popitem(last=False)
                self._bytes -= freed
                self.evictions += 1
